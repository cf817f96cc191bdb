package mongox_test

import (
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/agentmesh/agentmesh/libs/mongox"
)

// TestKeyset: the order and the continuation of both directions, as the
// stores' listings read them.
func TestKeyset(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		k        mongox.Keyset
		sort, op string
	}{
		{mongox.Keyset{Field: "create_time", Descending: true}, `{"create_time":{"$numberInt":"-1"},"_id":{"$numberInt":"-1"}}`, "$lt"},
		{mongox.Keyset{Field: "time"}, `{"time":{"$numberInt":"1"},"_id":{"$numberInt":"1"}}`, "$gt"},
	} {
		if got := mustJSON(t, tc.k.Sort()); got != tc.sort {
			t.Errorf("%+v Sort = %s, want %s", tc.k, got, tc.sort)
		}
		want := `{"$or":[{"` + tc.k.Field + `":{"` + tc.op + `":"v"}},{"` + tc.k.Field + `":"v","_id":{"` + tc.op + `":"i"}}]}`
		if got := mustJSON(t, bson.D{tc.k.After("v", "i")}); got != want {
			t.Errorf("%+v After = %s, want %s", tc.k, got, want)
		}
	}
}

func mustJSON(t *testing.T, d bson.D) string {
	t.Helper()
	b, err := bson.MarshalExtJSON(d, true, false)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
