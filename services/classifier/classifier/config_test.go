package classifier

import (
	"context"
	"strings"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/agentmesh/agentmesh/libs/config"
	"github.com/agentmesh/agentmesh/libs/service"
	"github.com/agentmesh/agentmesh/libs/testkit"
	"github.com/agentmesh/agentmesh/services/classifier/internal/conversations"
)

// CLASSIFIER_SAMPLE_DATA loads the sample set once into the sample scope.
func TestSampleDataLoadsOnce(t *testing.T) {
	t.Parallel()
	in := newInfra(t)
	env := map[string]string{"CLASSIFIER_SAMPLE_DATA": "true", "CLASSIFIER_SAMPLE_TENANT": "acme", "CLASSIFIER_SAMPLE_PROJECT": "support"}
	count := func() int64 {
		n, err := in.db.Collection(conversations.Collection).CountDocuments(testCtx(t), bson.D{{Key: "tenant_id", Value: "acme"}, {Key: "project_id", Value: "support"}})
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	a := startService(t, in, env, nil)
	if n := count(); n != 40 {
		t.Fatalf("%d sample conversations after the first start", n)
	}
	a.stop()
	startService(t, in, env, nil)
	if n := count(); n != 40 {
		t.Errorf("%d sample conversations after a restart", n)
	}
}

// Unusable limits stop the start with a message naming the variable.
func TestInvalidLimitsStopTheStart(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct{ env map[string]string }{
		"CLASSIFIER_BATCH_SIZE":      {map[string]string{"CLASSIFIER_BATCH_SIZE": "20", "CLASSIFIER_MAX_BATCH": "10"}},
		"CLASSIFIER_MAX_MODEL_CALLS": {map[string]string{"CLASSIFIER_MAX_MODEL_CALLS": "0"}},
		"CLASSIFIER_LEASE_TTL":       {map[string]string{"CLASSIFIER_LEASE_TTL": "10ms"}},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			vars := map[string]string{"MONGO_URI": "mongodb://127.0.0.1:1", "NATS_URL": "nats://127.0.0.1:1"}
			for k, v := range tc.env {
				vars[k] = v
			}
			var cfg Config
			if err := config.Load("", &cfg, config.Map(vars)); err != nil {
				t.Fatal(err)
			}
			err := Run(context.Background(), &cfg, service.Runtime{Listener: testkit.Listen(t)})
			if err == nil || !strings.Contains(err.Error(), name) {
				t.Errorf("Run: %v, want an error naming %s", err, name)
			}
		})
	}
}

// Every classifier variable is documented with a help text.
func TestConfigVariablesAreDocumented(t *testing.T) {
	t.Parallel()
	for _, v := range config.Vars("", &Config{}) {
		if strings.HasPrefix(v.Name, "CLASSIFIER_") && v.Help == "" {
			t.Errorf("%s has no help text", v.Name)
		}
	}
}
