package manifests

import (
	"fmt"
	"net"
	"net/url"
	"regexp"
	"strings"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/yaml"
)

// monitor is a ServiceMonitor reduced to what the policy asks of it.
type monitor struct {
	sel   labels.Selector
	ports map[string]string // port name → path
}

func (m monitor) selects(l map[string]string) bool { return m.sel.Matches(labels.Set(l)) }

func monitors(objs []Object) []monitor {
	var out []monitor
	for _, sm := range of[*monitoringv1.ServiceMonitor](objs) {
		sel, err := metav1.LabelSelectorAsSelector(&sm.Spec.Selector)
		if err != nil {
			continue
		}
		m := monitor{sel: sel, ports: map[string]string{}}
		for _, e := range sm.Spec.Endpoints {
			if e.Port == "" {
				continue
			}
			p := "/metrics" // the operator's default
			if e.Path != "" {
				p = e.Path
			}
			m.ports[e.Port] = p
		}
		out = append(out, m)
	}
	return out
}

// nats: JetStream replicates a stream with 3 replicas only across three
// servers that route to each other; a route list that misses one, or a
// server name that is not unique, splits the cluster silently.
func (c *checker) nats() Result {
	res := Result{Name: "NATS: a JetStream cluster of 3 servers whose routes name every server through the headless Service"}
	var w *workload
	for _, x := range c.ws {
		if x.pod.Labels["app.kubernetes.io/component"] == "nats" {
			w = x
		}
	}
	if w == nil {
		res.Violations = append(res.Violations, "no NATS StatefulSet is rendered")
		res.Checked = "0 servers"
		return res
	}
	res.Checked = fmt.Sprintf("%d servers", w.replicas)
	if !w.stateful() || w.replicas != 3 {
		res.Violations = append(res.Violations, fmt.Sprintf("%s: want a StatefulSet of 3 replicas, got %d", w.id(), w.replicas))
	}
	var conf string
	for _, v := range w.pod.Spec.Volumes {
		if v.ConfigMap != nil {
			if cm, ok := configMaps(c.objs)[v.ConfigMap.Name]; ok {
				conf = cm.Data["nats.conf"]
			}
		}
	}
	if conf == "" {
		res.Violations = append(res.Violations, w.id()+" mounts no ConfigMap with nats.conf")
		return res
	}
	if !regexp.MustCompile(`(?m)^\s*jetstream\s*\{`).MatchString(conf) {
		res.Violations = append(res.Violations, "nats.conf does not enable JetStream")
	}
	if !regexp.MustCompile(`(?m)^\s*server_name:\s*\$POD_NAME\s*$`).MatchString(conf) {
		res.Violations = append(res.Violations, "nats.conf does not name each server after its pod (server_name: $POD_NAME): JetStream needs unique server names")
	}
	var headless string
	for _, s := range of[*corev1.Service](c.objs) {
		if s.Spec.ClusterIP == corev1.ClusterIPNone && selectsAll(s.Spec.Selector, w.pod.Labels) && s.Spec.PublishNotReadyAddresses {
			headless = s.Name
		}
	}
	if headless == "" {
		res.Violations = append(res.Violations, "no headless Service publishing not-ready NATS pods: servers cannot find each other while they start")
	}
	routes := regexp.MustCompile(`nats://([a-z0-9.-]+):6222`).FindAllStringSubmatch(conf, -1)
	got := map[string]bool{}
	for _, r := range routes {
		got[r[1]] = true
	}
	for i := int32(0); i < w.replicas; i++ {
		want := fmt.Sprintf("%s-%d.%s", w.name, i, headless)
		if !got[want] {
			res.Violations = append(res.Violations, "nats.conf routes do not name "+want)
		}
		delete(got, want)
	}
	for r := range got {
		res.Violations = append(res.Violations, "nats.conf routes name "+r+", which is no server of "+w.id())
	}
	return res
}

// routing is the part of the model gateway's routing file the policy
// reads (services/modelgateway/internal/routing is that module's own).
type routing struct {
	Providers map[string]struct {
		Type    string `json:"type"`
		BaseURL string `json:"base_url"`
	} `json:"providers"`
	Models map[string][]struct {
		Provider string `json:"provider"`
		Model    string `json:"model"`
	} `json:"models"`
}

// vision: the design puts vision next to its model server on GPU nodes.
// That holds only if the vision container's model gateway is in its own
// pod, that gateway's routing sends the vision model nowhere but a server
// on loopback, a container of the pod serves that port, and the pod is on
// GPU nodes with a GPU for that server.
func (c *checker) vision() Result {
	res := Result{Name: "vision: on GPU nodes with a GPU for its model server, and its model calls go only to that server, on loopback in the pod"}
	var w *workload
	for _, x := range c.ws {
		if x.name == "vision" {
			w = x
		}
	}
	if w == nil {
		res.Violations = append(res.Violations, "no vision workload is rendered")
		return res
	}
	fail := func(f string, a ...any) { res.Violations = append(res.Violations, w.id()+": "+fmt.Sprintf(f, a...)) }
	spec := w.pod.Spec
	var vision, gateway *corev1.Container
	for _, ct := range c.cs {
		if ct.w != w || ct.init {
			continue
		}
		switch meshService(ct.c.Image, c.r.EnvVars) {
		case "vision":
			vision = ct.c
		case "modelgateway":
			gateway = ct.c
		}
	}
	if vision == nil || gateway == nil {
		fail("want the vision container and a modelgateway container in one pod")
		res.Checked = "0 model routes"
		return res
	}
	// vision → model gateway on loopback, which the pod's gateway serves.
	mgAddr := envValue(vision, "MODELGATEWAY_ADDR")
	host, port, err := net.SplitHostPort(strings.TrimPrefix(mgAddr, "dns:///"))
	if err != nil || !loopback(host) {
		fail("vision's MODELGATEWAY_ADDR %q is not a loopback address: its model calls would leave the pod", mgAddr)
	} else if ga := envValue(gateway, "GRPC_ADDR"); !strings.HasSuffix(ga, ":"+port) {
		fail("vision calls the model gateway on port %s but the pod's model gateway listens on %q", port, ga)
	}
	for _, v := range spec.Volumes {
		for _, m := range gateway.VolumeMounts {
			if m.Name == v.Name && (v.Secret != nil || v.Projected != nil) {
				fail("the pod's model gateway mounts Secret volume %s: it needs no provider keys, and with them could reach a provider", v.Name)
			}
		}
	}
	for _, e := range gateway.Env {
		if strings.HasSuffix(e.Name, "_API_KEY") || strings.HasSuffix(e.Name, "_API_KEY_FILE") || e.Name == "MODELGATEWAY_PROVIDER" {
			fail("the pod's model gateway sets %s: it must route by its file only", e.Name)
		}
	}
	// The routing file: the vision model's chain is only servers on loopback
	// that a container of this pod serves.
	rt, model, msg := c.podRouting(w, gateway)
	if msg != "" {
		fail("%s", msg)
		res.Checked = "0 model routes"
		return res
	}
	logical := envValue(vision, "VISION_MODEL")
	if logical == "" {
		logical = "vision" // the config struct's default
	}
	chain := rt.Models[logical]
	if len(chain) == 0 {
		fail("the pod's routing file has no route for logical model %q", logical)
	}
	res.Checked = fmt.Sprintf("%d model routes", len(chain))
	var gpuServer *corev1.Container
	for _, t := range chain {
		p, ok := rt.Providers[t.Provider]
		typ := p.Type
		if !ok && (t.Provider == "ollama" || t.Provider == "openai") {
			typ = t.Provider
		}
		if typ != "ollama" && typ != "openai" {
			fail("logical model %q routes to provider %q of type %q, not a model server in the pod", logical, t.Provider, typ)
			continue
		}
		base := p.BaseURL
		if base == "" && typ == "ollama" {
			base = envValue(gateway, "OLLAMA_HOST")
		}
		if base == "" && typ == "openai" {
			base = envValue(gateway, "OPENAI_BASE_URL")
		}
		u, err := url.Parse(base)
		if err != nil || u.Hostname() == "" || !loopback(u.Hostname()) {
			fail("logical model %q routes to %q at %q, which is not loopback", logical, t.Provider, base)
			continue
		}
		port := u.Port()
		for _, ct := range c.cs {
			if ct.w == w && !ct.init && ct.c != gateway && ct.c != vision {
				for _, p := range ct.c.Ports {
					if fmt.Sprint(p.ContainerPort) == port {
						gpuServer = ct.c
					}
				}
			}
		}
		if gpuServer == nil {
			fail("logical model %q routes to port %s, which no model server container of the pod serves", logical, port)
		}
		if model != "" && t.Model != model {
			fail("the pod pulls model %q but routes %q to %q", model, logical, t.Model)
		}
	}
	gpu := corev1.ResourceName("nvidia.com/gpu")
	if c.r.GPU {
		if spec.NodeSelector["nvidia.com/gpu.present"] != "true" {
			fail(`nodeSelector lacks nvidia.com/gpu.present: "true"`)
		}
		tolerated := false
		for _, t := range spec.Tolerations {
			if t.Key == string(gpu) && (t.Effect == corev1.TaintEffectNoSchedule || t.Effect == "") {
				tolerated = true
			}
		}
		if !tolerated {
			fail("no toleration for the %s taint", gpu)
		}
		if gpuServer != nil {
			if q, ok := gpuServer.Resources.Limits[gpu]; !ok || q.Value() < 1 {
				fail("model server %s has no %s limit", gpuServer.Name, gpu)
			}
		}
	} else if gpuServer != nil {
		if _, ok := gpuServer.Resources.Limits[gpu]; ok {
			fail("this overlay has no GPU nodes but %s asks for a GPU: the pod would never schedule", gpuServer.Name)
		}
	}
	return res
}

// podRouting reads the routing file the pod's model gateway is given, and
// the model the pod pulls (the ConfigMap's "model" key, "" if none).
func (c *checker) podRouting(w *workload, gateway *corev1.Container) (*routing, string, string) {
	file := envValue(gateway, "MODELGATEWAY_CONFIG")
	if file == "" {
		return nil, "", "the pod's model gateway has no MODELGATEWAY_CONFIG: its built-in routing sends vision to Qwen's cloud first"
	}
	for _, m := range gateway.VolumeMounts {
		rel, ok := strings.CutPrefix(file, strings.TrimRight(m.MountPath, "/")+"/")
		if !ok {
			continue
		}
		for _, v := range w.pod.Spec.Volumes {
			if v.Name != m.Name || v.ConfigMap == nil {
				continue
			}
			cm, ok := configMaps(c.objs)[v.ConfigMap.Name]
			if !ok {
				return nil, "", "routing ConfigMap " + v.ConfigMap.Name + " is not rendered"
			}
			var rt routing
			if err := yaml.UnmarshalStrict([]byte(cm.Data[itemKey(rel, v.ConfigMap.Items)]), &rt); err != nil {
				return nil, "", fmt.Sprintf("routing file in ConfigMap %s: %v", cm.Name, err)
			}
			return &rt, cm.Data["model"], ""
		}
	}
	return nil, "", fmt.Sprintf("MODELGATEWAY_CONFIG=%s is not in a ConfigMap mounted in the model gateway container", file)
}

func loopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// mongo: MongoDB is external by default (a replica set the platform runs);
// an overlay that runs its own runs exactly one single-node StatefulSet,
// and its mongo-uri points at it.
func (c *checker) mongo() Result {
	res := Result{Name: "MongoDB: external unless the overlay runs a single-node StatefulSet that its mongo-uri names"}
	var ws []*workload
	for _, w := range c.ws {
		if w.pod.Labels["app.kubernetes.io/component"] == "mongo" {
			ws = append(ws, w)
		}
	}
	res.Checked = count(len(ws), "MongoDB workloads")
	if !c.r.InClusterMongo {
		for _, w := range ws {
			res.Violations = append(res.Violations, w.id()+": this overlay uses an external MongoDB and must not run one")
		}
		for _, s := range of[*corev1.Secret](c.objs) {
			if _, ok := s.Data["mongo-uri"]; ok {
				res.Violations = append(res.Violations, "Secret/"+s.Name+" commits a mongo-uri: production credentials are created by the operator")
			}
		}
		return res
	}
	if len(ws) != 1 || !ws[0].stateful() || ws[0].replicas != 1 {
		res.Violations = append(res.Violations, fmt.Sprintf("want one single-replica MongoDB StatefulSet, got %d workloads", len(ws)))
		return res
	}
	w := ws[0]
	var uri string
	for _, s := range of[*corev1.Secret](c.objs) {
		if v, ok := s.Data["mongo-uri"]; ok {
			uri = string(v)
		}
	}
	u, err := url.Parse(uri)
	if err != nil || u.Scheme != "mongodb" {
		res.Violations = append(res.Violations, fmt.Sprintf("mongo-uri %q is not a mongodb:// URI", uri))
		return res
	}
	var svc string
	for _, s := range of[*corev1.Service](c.objs) {
		if selectsAll(s.Spec.Selector, w.pod.Labels) {
			svc = s.Name
		}
	}
	if want := fmt.Sprintf("%s-0.%s", w.name, svc); !strings.HasPrefix(u.Host, want+":") && u.Host != want && u.Hostname() != svc {
		res.Violations = append(res.Violations, fmt.Sprintf("mongo-uri host %q is neither %s nor %s", u.Host, want, svc))
	}
	return res
}
