package manifests

import (
	"context"
	"net/url"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	corev1 "k8s.io/api/core/v1"

	"github.com/agentmesh/agentmesh/libs/config"
	commonv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/common/v1"
	visionv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/vision/v1"
	"github.com/agentmesh/agentmesh/libs/service"
	"github.com/agentmesh/agentmesh/libs/testkit"
	"github.com/agentmesh/agentmesh/libs/testkit/providersim"
	"github.com/agentmesh/agentmesh/services/modelgateway/modelgatewaytest"
	"github.com/agentmesh/agentmesh/services/vision/vision"
)

// TestVisionPodKeepsImagesInThePod runs what each overlay's vision pod runs:
// the real model gateway with the pod's routing file and its container's
// environment, and the real vision service with its container's
// environment, with the pod's Ollama played by the simulator, which knows
// only the model the pod pulls. An image analysis must reach that model at
// the pod's Ollama. The only change to the rendered values is the loopback
// ports, which a test cannot fix; that they are loopback is asserted.
func TestVisionPodKeepsImagesInThePod(t *testing.T) {
	t.Parallel()
	for _, overlay := range overlays(t) {
		t.Run(overlay, func(t *testing.T) {
			t.Parallel()
			objs := decode(t, render(t, overlay))
			cm := find[*corev1.ConfigMap](t, objs, "ConfigMap", "vision-model")
			model := cm.Data["model"]
			env := func(name string) map[string]string {
				out := map[string]string{}
				c := ctr(t, objs, "Deployment", "vision", name)
				for _, ef := range c.EnvFrom {
					for k, v := range find[*corev1.ConfigMap](t, objs, "ConfigMap", ef.ConfigMapRef.Name).Data {
						out[k] = v
					}
				}
				for _, e := range c.Env {
					if e.ValueFrom == nil {
						out[e.Name] = e.Value
					}
				}
				return out
			}

			sim := providersim.Start(t, providersim.Options{Flavor: providersim.Ollama, Models: []string{model}})
			gwEnv := env("modelgateway")
			loopbackURL(t, "the pod's OLLAMA_HOST", gwEnv["OLLAMA_HOST"])
			gwEnv["OLLAMA_HOST"] = sim.URL
			delete(gwEnv, "MODELGATEWAY_CONFIG") // the routing file below, written where the test can
			gwAddr := modelgatewaytest.Start(t, cm.Data["routing.yaml"], gwEnv)

			vEnv := env("vision")
			loopbackURL(t, "vision's MODELGATEWAY_ADDR", "grpc://"+vEnv["MODELGATEWAY_ADDR"])
			vEnv["MODELGATEWAY_ADDR"] = gwAddr
			var cfg vision.Config
			if err := config.Load("", &cfg, config.Map(vEnv)); err != nil {
				t.Fatalf("vision config from the rendered env: %v", err)
			}
			addr := testkit.RunService(t, "vision", func(ctx context.Context, rt service.Runtime) error {
				return vision.Run(ctx, &cfg, rt)
			})
			conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = conn.Close() })

			sim.When(providersim.Match{WithImages: true}).Text("A rack of servers, one with a red fault light.")
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			resp, err := visionv1.NewVisionServiceClient(conn).AnalyzeImages(ctx, &visionv1.AnalyzeImagesRequest{
				Scope:       &commonv1.Scope{TenantId: "acme", ProjectId: "intake"},
				Images:      []*visionv1.Image{{Name: "rack.png", Data: testkit.PNG(t, 7), MimeType: "image/png"}},
				ContentType: visionv1.ContentType_CONTENT_TYPE_GENERIC,
			})
			if err != nil {
				t.Fatalf("AnalyzeImages through the pod's gateway: %v", err)
			}
			if got := resp.GetImages()[0].GetGeneralDescription(); got != "A rack of servers, one with a red fault light." {
				t.Errorf("description = %q, want the pod's model's answer", got)
			}
			reqs := sim.Requests()
			images := 0
			for _, r := range reqs {
				if r.Path != "/api/chat" || r.Model != model {
					t.Errorf("the pod's Ollama got %s %s for model %q, want /api/chat for %q", r.Method, r.Path, r.Model, model)
				}
				for _, m := range r.Messages {
					images += len(m.Images)
				}
			}
			if images == 0 {
				t.Fatalf("no image reached the pod's Ollama (%d requests)", len(reqs))
			}
			t.Logf("overlay %s: %d model calls with %d images reached the pod's Ollama for model %s", overlay, len(reqs), images, model)
		})
	}
}

func loopbackURL(t *testing.T, what, raw string) {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil || !loopback(u.Hostname()) {
		t.Fatalf("%s = %q, want a loopback address", what, raw)
	}
}
