package manifests

import (
	"strings"
	"testing"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// find returns the rendered object of that kind and name.
func find[T any](t *testing.T, objs []Object, kind, name string) T {
	t.Helper()
	for _, o := range objs {
		if o.Kind == kind && o.Name == name {
			return o.Value.(T)
		}
	}
	var zero T
	t.Fatalf("%s/%s is not rendered", kind, name)
	return zero
}

func ctr(t *testing.T, objs []Object, kind, name, container string) *corev1.Container {
	t.Helper()
	var spec *corev1.PodSpec
	switch kind {
	case "Deployment":
		spec = &find[*appsv1.Deployment](t, objs, kind, name).Spec.Template.Spec
	case "StatefulSet":
		spec = &find[*appsv1.StatefulSet](t, objs, kind, name).Spec.Template.Spec
	}
	for _, list := range [][]corev1.Container{spec.Containers, spec.InitContainers} {
		for i := range list {
			if list[i].Name == container {
				return &list[i]
			}
		}
	}
	t.Fatalf("%s/%s has no container %s", kind, name, container)
	return nil
}

func podSpec(t *testing.T, objs []Object, kind, name string) *corev1.PodSpec {
	t.Helper()
	if kind == "StatefulSet" {
		return &find[*appsv1.StatefulSet](t, objs, kind, name).Spec.Template.Spec
	}
	return &find[*appsv1.Deployment](t, objs, kind, name).Spec.Template.Spec
}

func drop(objs []Object, kind, name string) []Object {
	var out []Object
	for _, o := range objs {
		if o.Kind != kind || o.Name != name {
			out = append(out, o)
		}
	}
	return out
}

func setEnv(c *corev1.Container, name, value string) {
	for i := range c.Env {
		if c.Env[i].Name == name {
			c.Env[i].Value = value
			return
		}
	}
	c.Env = append(c.Env, corev1.EnvVar{Name: name, Value: value})
}

// TestPolicyCatchesViolations breaks the rendered production (or dev)
// manifests one way at a time, each a mistake the Kubernetes docs or the
// issue name, and asserts that the rule meant for it reports it naming the
// object, while the unbroken render passes (TestOverlaysHoldThePolicy).
func TestPolicyCatchesViolations(t *testing.T) {
	t.Parallel()
	r := rules(t)
	docs := map[string][][]byte{"production": render(t, "production"), "dev": render(t, "dev")}
	cases := []struct {
		name, overlay string
		breakIt       func(t *testing.T, objs []Object) []Object
		rule, want    string
	}{
		{"label value too long", "production", func(t *testing.T, o []Object) []Object {
			find[*corev1.Service](t, o, "Service", "classifier").Labels["team"] = strings.Repeat("x", 64)
			return o
		}, "syntax rules", "Service/classifier label team"},
		{"port name over 15 characters", "production", func(t *testing.T, o []Object) []Object {
			ctr(t, o, "Deployment", "vision", "modelgateway").Ports[1].Name = "modelgw-metrics-port"
			return o
		}, "syntax rules", "port modelgw-metrics-port"},
		{"no /tmp where PDFs are written", "production", func(t *testing.T, o []Object) []Object {
			c := ctr(t, o, "StatefulSet", "indexer", "indexer")
			c.VolumeMounts = c.VolumeMounts[:1]
			return o
		}, "temporary files", "StatefulSet/indexer container indexer: no writable /tmp"},
		{"no liveness probe", "production", func(t *testing.T, o []Object) []Object {
			ctr(t, o, "Deployment", "orchestrator", "orchestrator").LivenessProbe = nil
			return o
		}, "readiness and a liveness probe", "Deployment/orchestrator container orchestrator has no liveness probe"},
		{"probe on an undeclared port", "production", func(t *testing.T, o []Object) []Object {
			ctr(t, o, "Deployment", "vision", "ollama").ReadinessProbe.HTTPGet.Port = intstr.FromString("api")
			return o
		}, "readiness and a liveness probe", `port "api" is not a port of the container`},
		{"liveness on the dependency-following health", "production", func(t *testing.T, o []Object) []Object {
			ctr(t, o, "Deployment", "classifier", "classifier").LivenessProbe.GRPC.Service = nil
			return o
		}, "grpc.health.v1", `classifier liveness probe is not grpc with service "liveness"`},
		{"gateway ready whatever its backends say", "production", func(t *testing.T, o []Object) []Object {
			ctr(t, o, "Deployment", "gateway", "gateway").ReadinessProbe.HTTPGet.Path = "/livez"
			return o
		}, "grpc.health.v1", "gateway readiness probe is not httpGet /readyz"},
		{"gateway liveness following its backends", "production", func(t *testing.T, o []Object) []Object {
			ctr(t, o, "Deployment", "gateway", "gateway").LivenessProbe.HTTPGet.Path = "/readyz"
			return o
		}, "grpc.health.v1", "gateway liveness probe is not httpGet /livez"},
		{"service liveness on the dependency-following readiness", "production", func(t *testing.T, o []Object) []Object {
			l := ctr(t, o, "StatefulSet", "indexer", "indexer").LivenessProbe
			empty := ""
			l.GRPC.Service = &empty
			return o
		}, "grpc.health.v1", `indexer liveness probe is not grpc with service "liveness"`},
		{"service listening on loopback only", "production", func(t *testing.T, o []Object) []Object {
			setEnv(ctr(t, o, "Deployment", "sqlagent", "sqlagent"), "GRPC_ADDR", "127.0.0.1:9090")
			return o
		}, "grpc.health.v1", `GRPC_ADDR is "127.0.0.1:9090"`},
		{"no memory limit", "production", func(t *testing.T, o []Object) []Object {
			delete(ctr(t, o, "StatefulSet", "nats", "nats").Resources.Limits, corev1.ResourceMemory)
			return o
		}, "requests and limits", "StatefulSet/nats container nats has no memory limit"},
		{"request above limit", "production", func(t *testing.T, o []Object) []Object {
			ctr(t, o, "Deployment", "gateway", "gateway").Resources.Requests[corev1.ResourceCPU] = resource.MustParse("2")
			return o
		}, "requests and limits", "requests cpu 2 above its limit 1"},
		{"init container without resources", "production", func(t *testing.T, o []Object) []Object {
			ctr(t, o, "Deployment", "vision", "model-pull").Resources = corev1.ResourceRequirements{}
			return o
		}, "requests and limits", "container model-pull requests no cpu"},
		{"writable root filesystem", "production", func(t *testing.T, o []Object) []Object {
			f := false
			ctr(t, o, "Deployment", "vision", "ollama").SecurityContext.ReadOnlyRootFilesystem = &f
			return o
		}, "readOnlyRootFilesystem", "container ollama: readOnlyRootFilesystem is not true"},
		{"root by default", "production", func(t *testing.T, o []Object) []Object {
			podSpec(t, o, "Deployment", "modelgateway").SecurityContext.RunAsNonRoot = nil
			ctr(t, o, "Deployment", "modelgateway", "modelgateway").SecurityContext.RunAsNonRoot = nil
			return o
		}, "readOnlyRootFilesystem", "runAsNonRoot is not true"},
		{"uid 0 in the container overrides the pod", "production", func(t *testing.T, o []Object) []Object {
			zero := int64(0)
			ctr(t, o, "Deployment", "orchestrator", "orchestrator").SecurityContext.RunAsUser = &zero
			return o
		}, "readOnlyRootFilesystem", "runAsUser is 0"},
		{"an added capability", "production", func(t *testing.T, o []Object) []Object {
			ctr(t, o, "StatefulSet", "indexer", "indexer").SecurityContext.Capabilities.Add = []corev1.Capability{"NET_ADMIN"}
			return o
		}, "readOnlyRootFilesystem", "adds capabilities [NET_ADMIN]"},
		{"unconfined seccomp", "production", func(t *testing.T, o []Object) []Object {
			podSpec(t, o, "Deployment", "gateway").SecurityContext.SeccompProfile = &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeUnconfined}
			return o
		}, "readOnlyRootFilesystem", "seccomp profile is not RuntimeDefault"},
		{"hostPath volume", "production", func(t *testing.T, o []Object) []Object {
			s := podSpec(t, o, "Deployment", "sqlagent")
			s.Volumes = append(s.Volumes, corev1.Volume{Name: "host", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/var"}}})
			return o
		}, "hostPath", "volume host is a hostPath"},
		{"service account token mounted", "production", func(t *testing.T, o []Object) []Object {
			podSpec(t, o, "Deployment", "classifier").AutomountServiceAccountToken = nil
			return o
		}, "hostPath", "Deployment/classifier mounts a service account token"},
		{"missing PodDisruptionBudget", "production", func(t *testing.T, o []Object) []Object {
			return drop(o, "PodDisruptionBudget", "sqlagent")
		}, "PodDisruptionBudget", "Deployment/sqlagent has no PodDisruptionBudget"},
		{"budget that blocks every drain", "production", func(t *testing.T, o []Object) []Object {
			p := find[*policyv1.PodDisruptionBudget](t, o, "PodDisruptionBudget", "indexer")
			two := intstr.FromInt32(2)
			p.Spec.MaxUnavailable, p.Spec.MinAvailable = nil, &two
			return o
		}, "PodDisruptionBudget", "minAvailable 2 allows no eviction of 2 replicas"},
		{"two budgets on one pod", "production", func(t *testing.T, o []Object) []Object {
			p := find[*policyv1.PodDisruptionBudget](t, o, "PodDisruptionBudget", "gateway").DeepCopy()
			p.Name = "gateway-2"
			return append(o, Object{Kind: "PodDisruptionBudget", Name: p.Name, Value: p})
		}, "PodDisruptionBudget", "Deployment/gateway is selected by 2 PodDisruptionBudgets"},
		{"autoscaler on a StatefulSet", "production", func(t *testing.T, o []Object) []Object {
			h := find[*autoscalingv2.HorizontalPodAutoscaler](t, o, "HorizontalPodAutoscaler", "classifier")
			h.Spec.ScaleTargetRef.Kind, h.Spec.ScaleTargetRef.Name = "StatefulSet", "indexer"
			return o
		}, "HorizontalPodAutoscalers", "scales StatefulSet/indexer, which is not a stateless"},
		{"stateless Deployment without autoscaler", "production", func(t *testing.T, o []Object) []Object {
			return drop(o, "HorizontalPodAutoscaler", "orchestrator")
		}, "HorizontalPodAutoscalers", "Deployment/orchestrator is stateless but has no HorizontalPodAutoscaler"},
		{"no spread over nodes", "production", func(t *testing.T, o []Object) []Object {
			podSpec(t, o, "Deployment", "modelgateway").TopologySpreadConstraints = nil
			return o
		}, "spreads its pods", "Deployment/modelgateway does not spread over kubernetes.io/hostname"},
		{"spread that selects another workload", "production", func(t *testing.T, o []Object) []Object {
			podSpec(t, o, "Deployment", "gateway").TopologySpreadConstraints[1].LabelSelector.MatchLabels["app.kubernetes.io/name"] = "vision"
			return o
		}, "spreads its pods", "Deployment/gateway spread over kubernetes.io/hostname does not select its own pods"},
		{"Service targeting an undeclared port", "production", func(t *testing.T, o []Object) []Object {
			find[*corev1.Service](t, o, "Service", "orchestrator").Spec.Ports[1].TargetPort = intstr.FromString("metrix")
			return o
		}, "every Service selects", "Service/orchestrator port metrics targets metrix"},
		{"misspelt variable", "production", func(t *testing.T, o []Object) []Object {
			setEnv(ctr(t, o, "Deployment", "orchestrator", "orchestrator"), "MODELGATEWAY_ADRR", "dns:///modelgateway:9090")
			return o
		}, "config struct", "sets MODELGATEWAY_ADRR, which orchestrator's config does not read"},
		{"variable of another service", "production", func(t *testing.T, o []Object) []Object {
			setEnv(ctr(t, o, "Deployment", "vision", "vision"), "OLLAMA_HOST", "http://127.0.0.1:11434")
			return o
		}, "config struct", "Deployment/vision container vision sets OLLAMA_HOST, which vision's config does not read"},
		{"envFrom key the gateway does not read", "production", func(t *testing.T, o []Object) []Object {
			find[*corev1.ConfigMap](t, o, "ConfigMap", "agentmesh-env").Data["GRPC_ADDR"] = ":9090"
			return o
		}, "config struct", "Deployment/gateway container gateway sets GRPC_ADDR (envFrom ConfigMap agentmesh-env), which gateway's config does not read"},
		{"undocumented Secret key", "production", func(t *testing.T, o []Object) []Object {
			c := ctr(t, o, "Deployment", "classifier", "classifier")
			for i := range c.Env {
				if c.Env[i].Name == "MONGO_URI" {
					c.Env[i].ValueFrom.SecretKeyRef.Key = "mongo-url"
				}
			}
			return o
		}, "README.md documents", "uses key mongo-url of Secret agentmesh, which README.md does not document"},
		{"undocumented Secret", "production", func(t *testing.T, o []Object) []Object {
			s := podSpec(t, o, "Deployment", "modelgateway")
			s.Volumes[0].Secret.SecretName = "provider-keys"
			return o
		}, "README.md documents", "uses Secret provider-keys, which README.md does not document"},
		{"ConfigMap key that does not exist", "production", func(t *testing.T, o []Object) []Object {
			delete(find[*corev1.ConfigMap](t, o, "ConfigMap", "agentmesh").Data, "nats-url")
			return o
		}, "README.md documents", "uses key nats-url of ConfigMap agentmesh, which it does not have"},
		{"dev Secret missing a required key", "dev", func(t *testing.T, o []Object) []Object {
			delete(find[*corev1.Secret](t, o, "Secret", "agentmesh-providers").Data, "qwen-api-keys")
			return o
		}, "README.md documents", "Secret/agentmesh-providers lacks documented key qwen-api-keys"},
		{"optional key file", "production", func(t *testing.T, o []Object) []Object {
			yes := true
			podSpec(t, o, "Deployment", "modelgateway").Volumes[0].Secret.Optional = &yes
			return o
		}, "_FILE variable", "Secret volume provider-keys is optional"},
		{"key file outside the mount", "production", func(t *testing.T, o []Object) []Object {
			setEnv(ctr(t, o, "Deployment", "modelgateway", "modelgateway"), "QWEN_API_KEY_FILE", "/etc/qwen-api-keys")
			return o
		}, "_FILE variable", "QWEN_API_KEY_FILE=/etc/qwen-api-keys is no documented key"},
		{"key file of an optional key", "production", func(t *testing.T, o []Object) []Object {
			setEnv(ctr(t, o, "Deployment", "modelgateway", "modelgateway"), "OPENAI_API_KEY_FILE", "/var/run/secrets/agentmesh/providers/sqlagent-connections")
			podSpec(t, o, "Deployment", "modelgateway").Volumes[0].Secret.SecretName = "agentmesh"
			return o
		}, "_FILE variable", "key sqlagent-connections of Secret agentmesh is optional"},
		// Every pod of ours is also selected by an allowing policy, so only
		// a pod nobody wrote a policy for shows the default deny missing.
		{"no default deny", "production", func(t *testing.T, o []Object) []Object {
			return drop(o, "NetworkPolicy", "default-deny")
		}, "NetworkPolicies", "a pod of namespace other → an unlabelled pod of the namespace port 8080/TCP is allowed"},
		{"a service open to everyone", "production", func(t *testing.T, o []Object) []Object {
			p := find[*networkingv1.NetworkPolicy](t, o, "NetworkPolicy", "gateway-ingress")
			p.Spec.PodSelector = metav1.LabelSelector{MatchLabels: map[string]string{"app.kubernetes.io/part-of": "agentmesh"}}
			p.Spec.Ingress[0].Ports = nil // "http" alone names no port of the services
			return o
		}, "NetworkPolicies", "a pod of namespace other → Deployment/classifier port 9090/TCP is allowed"},
		{"provider egress into private ranges", "production", func(t *testing.T, o []Object) []Object {
			find[*networkingv1.NetworkPolicy](t, o, "NetworkPolicy", "modelgateway-providers-egress").Spec.Egress[0].To[0].IPBlock.Except = nil
			return o
		}, "NetworkPolicies", "Deployment/modelgateway → a private address port 443/TCP is allowed"},
		{"internet egress for every service", "production", func(t *testing.T, o []Object) []Object {
			find[*networkingv1.NetworkPolicy](t, o, "NetworkPolicy", "vision-model-pull-egress").Spec.PodSelector = metav1.LabelSelector{}
			return o
		}, "NetworkPolicies", "Deployment/classifier → an internet address port 443/TCP is allowed"},
		{"NATS clients cut off", "production", func(t *testing.T, o []Object) []Object {
			return drop(o, "NetworkPolicy", "nats-clients-egress")
		}, "NetworkPolicies", "Deployment/classifier → StatefulSet/nats port 4222/TCP is denied"},
		{"no scrape of the metrics port", "production", func(t *testing.T, o []Object) []Object {
			find[*monitoringv1.ServiceMonitor](t, o, "ServiceMonitor", "agentmesh").Spec.Endpoints[0].Path = "/stats"
			return o
		}, "ServiceMonitor", "Service/orchestrator has no port a ServiceMonitor scrapes at /metrics"},
		{"NATS route list missing a server", "production", func(t *testing.T, o []Object) []Object {
			cm := find[*corev1.ConfigMap](t, o, "ConfigMap", "nats-config")
			cm.Data["nats.conf"] = strings.Replace(cm.Data["nats.conf"], "nats://nats-2.nats-headless:6222", "", 1)
			return o
		}, "NATS", "routes do not name nats-2.nats-headless"},
		{"NATS of one server", "production", func(t *testing.T, o []Object) []Object {
			one := int32(1)
			find[*appsv1.StatefulSet](t, o, "StatefulSet", "nats").Spec.Replicas = &one
			return o
		}, "NATS", "want a StatefulSet of 3 replicas, got 1"},
		{"vision calls the shared model gateway", "production", func(t *testing.T, o []Object) []Object {
			setEnv(ctr(t, o, "Deployment", "vision", "vision"), "MODELGATEWAY_ADDR", "dns:///modelgateway:9090")
			return o
		}, "vision:", `MODELGATEWAY_ADDR "dns:///modelgateway:9090" is not a loopback address`},
		{"vision falls back to a cloud provider", "production", func(t *testing.T, o []Object) []Object {
			cm := find[*corev1.ConfigMap](t, o, "ConfigMap", "vision-model")
			cm.Data["routing.yaml"] += "    - {provider: qwen, model: qwen-vl-max}\n"
			return o
		}, "vision:", `routes to provider "qwen" of type "", not a model server in the pod`},
		{"vision's Ollama elsewhere", "production", func(t *testing.T, o []Object) []Object {
			setEnv(ctr(t, o, "Deployment", "vision", "modelgateway"), "OLLAMA_HOST", "http://ollama:11434")
			return o
		}, "vision:", `at "http://ollama:11434", which is not loopback`},
		{"vision's gateway given provider keys", "production", func(t *testing.T, o []Object) []Object {
			setEnv(ctr(t, o, "Deployment", "vision", "modelgateway"), "DEEPSEEK_API_KEY_FILE", "/keys/deepseek-api-keys")
			return o
		}, "vision:", "the pod's model gateway sets DEEPSEEK_API_KEY_FILE"},
		{"pulled model is not the routed one", "production", func(t *testing.T, o []Object) []Object {
			find[*corev1.ConfigMap](t, o, "ConfigMap", "vision-model").Data["model"] = "llava:7b"
			return o
		}, "vision:", `pulls model "llava:7b" but routes "vision" to "qwen2.5vl:7b"`},
		{"vision off the GPU nodes", "production", func(t *testing.T, o []Object) []Object {
			podSpec(t, o, "Deployment", "vision").NodeSelector = nil
			return o
		}, "vision:", "nodeSelector lacks nvidia.com/gpu.present"},
		{"model server without a GPU", "production", func(t *testing.T, o []Object) []Object {
			delete(ctr(t, o, "Deployment", "vision", "ollama").Resources.Limits, "nvidia.com/gpu")
			return o
		}, "vision:", "model server ollama has no nvidia.com/gpu limit"},
		{"GPU asked for where there are none", "dev", func(t *testing.T, o []Object) []Object {
			ctr(t, o, "Deployment", "vision", "ollama").Resources.Limits["nvidia.com/gpu"] = resource.MustParse("1")
			return o
		}, "vision:", "this overlay has no GPU nodes but ollama asks for a GPU"},
		{"MongoDB in production", "production", func(t *testing.T, o []Object) []Object {
			d := find[*appsv1.StatefulSet](t, o, "StatefulSet", "indexer").DeepCopy()
			d.Name = "mongo"
			d.Spec.Template.Labels = map[string]string{"app.kubernetes.io/component": "mongo"}
			return append(o, Object{Kind: "StatefulSet", Name: "mongo", Value: d})
		}, "MongoDB", "StatefulSet/mongo: this overlay uses an external MongoDB"},
		{"dev mongo-uri naming another host", "dev", func(t *testing.T, o []Object) []Object {
			find[*corev1.Secret](t, o, "Secret", "agentmesh").Data["mongo-uri"] = []byte("mongodb://localhost:27017/")
			return o
		}, "MongoDB", `mongo-uri host "localhost:27017" is neither mongo-0.mongo nor mongo`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			rr := r
			rr.GPU, rr.InClusterMongo = overlayRules[tc.overlay].gpu, overlayRules[tc.overlay].inClusterMongo
			objs := tc.breakIt(t, decode(t, docs[tc.overlay]))
			var matched []string
			for _, res := range Check(objs, rr) {
				if !strings.Contains(res.Name, tc.rule) {
					continue
				}
				matched = append(matched, res.Name)
				for _, v := range res.Violations {
					if strings.Contains(v, tc.want) {
						return
					}
				}
				t.Errorf("rule %q reports %q, want a violation containing %q", res.Name, res.Violations, tc.want)
			}
			if len(matched) == 0 {
				t.Fatalf("no rule named like %q", tc.rule)
			}
		})
	}
}

// TestDecodeIsStrict: kubectl apply drops or rejects what the API type does
// not have; the test must see it first.
func TestDecodeIsStrict(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, doc, want string }{
		{"misspelt probe", `{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"x"},"spec":{"template":{"spec":{"containers":[{"name":"x","readinesProbe":{}}]}}}}`, `unknown field "readinesProbe"`},
		{"field at the wrong level", `{"apiVersion":"v1","kind":"Service","metadata":{"name":"x"},"spec":{"selector":{"a":"b"}},"ports":[]}`, `unknown field "ports"`},
		{"ServiceMonitor field", `{"apiVersion":"monitoring.coreos.com/v1","kind":"ServiceMonitor","metadata":{"name":"x"},"spec":{"selector":{},"endpoint":[]}}`, `unknown field "endpoint"`},
		{"kind the policy does not know", `{"apiVersion":"networking.k8s.io/v1","kind":"Ingress","metadata":{"name":"x"}}`, "not one the policy checks"},
		{"old API version", `{"apiVersion":"policy/v1beta1","kind":"PodDisruptionBudget","metadata":{"name":"x"}}`, "not one the policy checks"},
		{"quantity that does not parse", `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"x"},"data":{"a":1}}`, "cannot unmarshal number"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Decode([][]byte{[]byte(tc.doc)})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Decode error = %v, want one containing %q", err, tc.want)
			}
		})
	}
}
