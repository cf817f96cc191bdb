package embed

import (
	"context"
	"math"
	"testing"
)

func cos(a, b []float32) float64 {
	var s float64
	for i := range a {
		s += float64(a[i]) * float64(b[i])
	}
	return s
}

func TestLocalHashSimilarity(t *testing.T) {
	t.Parallel()
	e := LocalHash{}
	vs, err := e.Embed(context.Background(), []string{
		"The payment service times out when calling the ledger",
		"Payments time out calling ledger service",
		"Quarterly dividend approved by the board of directors",
		"",
	})
	if err != nil {
		t.Fatal(err)
	}
	for i, v := range vs {
		if len(v) != LocalHashDimensions {
			t.Fatalf("vector %d has %d dimensions", i, len(v))
		}
		var n float64
		for _, x := range v {
			n += float64(x) * float64(x)
		}
		if math.Abs(n-1) > 1e-4 {
			t.Fatalf("vector %d has norm² %v, want 1", i, n)
		}
	}
	related, unrelated := cos(vs[0], vs[1]), cos(vs[0], vs[2])
	if related < 0.5 || related < unrelated+0.3 {
		t.Fatalf("similar texts %.3f, unrelated %.3f", related, unrelated)
	}
	// Deterministic.
	again := e.Vector("Payments time out calling ledger service")
	for i := range again {
		if again[i] != vs[1][i] {
			t.Fatal("same text, different vector")
		}
	}
}

func TestTokens(t *testing.T) {
	t.Parallel()
	got := Tokens("The Payments were FAILING, and the ledger-api retries!")
	want := []string{"payment", "fail", "ledger", "api", "retry"}
	if len(got) != len(want) {
		t.Fatalf("Tokens = %q, want %q", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("Tokens = %q, want %q", got, want)
		}
	}
}
