package manifests

import (
	"fmt"
	"net"
	"strings"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// peer is one end of a connection the network policy check tries: a pod of
// the rendered namespace (policies apply to it), a pod of another
// namespace, or an address outside the cluster.
type peer struct {
	name     string
	ns       string            // "" outside the cluster
	nsLabels map[string]string // the namespace's labels
	labels   map[string]string // the pod's labels
	ip       net.IP            // outside the cluster only
	ports    []corev1.ContainerPort
	ours     bool
	w        *workload
}

// netpol evaluates NetworkPolicies as the API defines them: a pod selected
// by no policy of a direction is open in it; a selected pod admits what
// some rule of a selecting policy admits; a connection needs the source's
// egress and the destination's ingress.
type netpol struct {
	ns   string
	pols []*networkingv1.NetworkPolicy
}

func (n netpol) allows(from, to *peer, port int32, proto corev1.Protocol) bool {
	return n.side(from, to, to, port, proto, networkingv1.PolicyTypeEgress) &&
		n.side(to, from, to, port, proto, networkingv1.PolicyTypeIngress)
}

// side decides one direction for subject (whose policies apply) talking
// with other; dst is the connection's destination, whose named ports the
// rules' port names resolve against.
func (n netpol) side(subject, other, dst *peer, port int32, proto corev1.Protocol, dir networkingv1.PolicyType) bool {
	if !subject.ours {
		return true // not ours to restrict
	}
	isolated := false
	for _, p := range n.pols {
		if !hasType(p, dir) || !matches(&p.Spec.PodSelector, subject.labels) {
			continue
		}
		isolated = true
		if dir == networkingv1.PolicyTypeIngress {
			for _, r := range p.Spec.Ingress {
				if n.peersMatch(r.From, other) && portsMatch(r.Ports, dst, port, proto) {
					return true
				}
			}
		} else {
			for _, r := range p.Spec.Egress {
				if n.peersMatch(r.To, other) && portsMatch(r.Ports, dst, port, proto) {
					return true
				}
			}
		}
	}
	return !isolated
}

func hasType(p *networkingv1.NetworkPolicy, t networkingv1.PolicyType) bool {
	if len(p.Spec.PolicyTypes) == 0 { // the API's default
		return t == networkingv1.PolicyTypeIngress || (t == networkingv1.PolicyTypeEgress && len(p.Spec.Egress) > 0)
	}
	for _, x := range p.Spec.PolicyTypes {
		if x == t {
			return true
		}
	}
	return false
}

func matches(sel *metav1.LabelSelector, l map[string]string) bool {
	s, err := metav1.LabelSelectorAsSelector(sel)
	return err == nil && s.Matches(labels.Set(l))
}

func (n netpol) peersMatch(peers []networkingv1.NetworkPolicyPeer, x *peer) bool {
	if len(peers) == 0 {
		return true
	}
	for _, p := range peers {
		if p.IPBlock != nil {
			if x.ip != nil && inBlock(p.IPBlock, x.ip) {
				return true
			}
			continue
		}
		if x.ip != nil {
			continue // pod and namespace selectors select pods only
		}
		if p.NamespaceSelector == nil {
			if x.ns != n.ns {
				continue
			}
		} else if !matches(p.NamespaceSelector, x.nsLabels) {
			continue
		}
		if p.PodSelector == nil || matches(p.PodSelector, x.labels) {
			return true
		}
	}
	return false
}

func inBlock(b *networkingv1.IPBlock, ip net.IP) bool {
	_, cidr, err := net.ParseCIDR(b.CIDR)
	if err != nil || !cidr.Contains(ip) {
		return false
	}
	for _, e := range b.Except {
		if _, ex, err := net.ParseCIDR(e); err == nil && ex.Contains(ip) {
			return false
		}
	}
	return true
}

func portsMatch(ports []networkingv1.NetworkPolicyPort, dst *peer, port int32, proto corev1.Protocol) bool {
	if len(ports) == 0 {
		return true
	}
	for _, p := range ports {
		pp := corev1.ProtocolTCP
		if p.Protocol != nil {
			pp = *p.Protocol
		}
		if pp != proto {
			continue
		}
		if p.Port == nil {
			return true
		}
		if p.Port.Type == intstr.String {
			for _, cp := range dst.ports {
				cpp := cp.Protocol
				if cpp == "" {
					cpp = corev1.ProtocolTCP
				}
				if cp.Name == p.Port.StrVal && cp.ContainerPort == port && cpp == proto {
					return true
				}
			}
			continue
		}
		end := p.Port.IntVal
		if p.EndPort != nil {
			end = *p.EndPort
		}
		if port >= p.Port.IntVal && port <= end {
			return true
		}
	}
	return false
}

// networkPolicies tries every connection the rules speak of
// against the rendered policies: only the gateway takes traffic from
// outside; services take gRPC only from the mesh; egress goes to the mesh,
// DNS, the collector, and NATS, MongoDB, the providers and databases only
// from the pods whose configuration uses them.
func (c *checker) networkPolicies() Result {
	res := Result{Name: "NetworkPolicies: only the gateway and the model gateway's OpenAI-compatible port take ingress from outside; services only from the mesh; egress only to what each pod's configuration uses"}
	pols := of[*networkingv1.NetworkPolicy](c.objs)
	ns := ""
	for _, o := range c.objs {
		if o.Namespace != "" {
			ns = o.Namespace
		}
	}
	n := netpol{ns: ns, pols: pols}
	nsLabels := func(name string) map[string]string { return map[string]string{"kubernetes.io/metadata.name": name} }
	var pods []*peer
	for _, w := range c.ws {
		p := &peer{name: w.id(), ns: ns, nsLabels: nsLabels(ns), labels: w.pod.Labels, ours: true, w: w}
		for _, ct := range c.cs {
			if ct.w == w {
				p.ports = append(p.ports, ct.c.Ports...)
			}
		}
		pods = append(pods, p)
	}
	outside := func(name, ip string) *peer { return &peer{name: name, ip: net.ParseIP(ip)} }
	internet := outside("an internet address", "203.0.113.10")
	private := outside("a private address", "10.1.2.3")
	metadata := outside("the cloud metadata address", "169.254.169.254")
	otherNS := &peer{name: "a pod of namespace other", ns: "other", nsLabels: nsLabels("other"), labels: map[string]string{"app": "x"}}
	stranger := &peer{name: "an unlabelled pod of the namespace", ns: ns, nsLabels: nsLabels(ns), labels: map[string]string{"app": "x"}, ours: true,
		ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}}}
	prometheus := &peer{name: "Prometheus", ns: "monitoring", nsLabels: nsLabels("monitoring"), labels: map[string]string{"app.kubernetes.io/name": "prometheus"}}
	dns := &peer{name: "kube-dns", ns: "kube-system", nsLabels: nsLabels("kube-system"), labels: map[string]string{"k8s-app": "kube-dns"}}
	collector := &peer{name: "the OTel collector", ns: "observability", nsLabels: nsLabels("observability"), labels: map[string]string{"app": "otel-collector"},
		ports: []corev1.ContainerPort{{Name: "otlp-grpc", ContainerPort: 4317}, {Name: "otlp-http", ContainerPort: 4318}}}

	tried := 0
	want := func(ok bool, from, to *peer, port int32, proto corev1.Protocol, why string) {
		tried++
		if got := n.allows(from, to, port, proto); got != ok {
			verb := "denied"
			if got {
				verb = "allowed"
			}
			res.Violations = append(res.Violations, fmt.Sprintf("%s → %s port %d/%s is %s (%s)", from.name, to.name, port, proto, verb, why))
		}
	}
	comp := func(p *peer) string { return p.labels["app.kubernetes.io/component"] }
	mesh := func(p *peer) bool { return comp(p) == "gateway" || comp(p) == "service" }
	uses := func(p *peer, test func(corev1.Container) bool) bool {
		for _, ct := range c.cs {
			if ct.w == p.w && test(*ct.c) {
				return true
			}
		}
		return false
	}
	hasEnv := func(names ...string) func(corev1.Container) bool {
		return func(ct corev1.Container) bool {
			for _, e := range ct.Env {
				for _, n := range names {
					if e.Name == n || (strings.HasPrefix(n, "*") && strings.HasSuffix(e.Name, n[1:])) {
						return true
					}
				}
			}
			return false
		}
	}
	pullsModel := func(ct corev1.Container) bool { return strings.Contains(ct.Image, "ollama") }
	byComp := func(c string) []*peer {
		var out []*peer
		for _, p := range pods {
			if comp(p) == c {
				out = append(out, p)
			}
		}
		return out
	}

	for _, to := range pods {
		// Ingress from outside the mesh: the gateway's HTTP port, and the
		// model gateway's OpenAI-compatible port where it serves one.
		for _, cp := range to.ports {
			gatewayHTTP := comp(to) == "gateway" && cp.Name == "http"
			openAI := comp(to) == "service" && cp.Name == "openai" && uses(to, hasEnv("MODELGATEWAY_OPENAI_ADDR"))
			for _, from := range []*peer{internet, otherNS} {
				want(gatewayHTTP || openAI, from, to, cp.ContainerPort, corev1.ProtocolTCP, "only the gateway and the model gateway's OpenAI-compatible port take ingress from outside the mesh")
			}
			want(false, stranger, to, cp.ContainerPort, corev1.ProtocolTCP, "a pod of the namespace outside the mesh reaches nothing")
			scrape := mesh(to) && (cp.Name == "metrics" || cp.Name == "model-metrics")
			want(scrape || gatewayHTTP || openAI, prometheus, to, cp.ContainerPort, corev1.ProtocolTCP, "Prometheus scrapes metrics ports only")
		}
		// Services take gRPC from every mesh pod, and from no other.
		if comp(to) == "service" {
			for _, cp := range to.ports {
				if cp.Name != "grpc" {
					continue
				}
				for _, from := range pods {
					want(mesh(from), from, to, cp.ContainerPort, corev1.ProtocolTCP, "services take gRPC from the mesh only")
				}
			}
		}
	}
	for _, from := range pods {
		want(true, from, dns, 53, corev1.ProtocolUDP, "every pod resolves names")
		if mesh(from) {
			want(true, from, collector, 4317, corev1.ProtocolTCP, "the mesh exports telemetry to the OTel collector")
			want(true, from, collector, 4318, corev1.ProtocolTCP, "the mesh exports telemetry to the OTel collector over OTLP/HTTP")
		}
		// The internet: HTTPS only for the provider-facing model gateway,
		// vision's model pull and the orchestrator's MCP servers; nothing
		// else, and never the private ranges.
		https := uses(from, hasEnv("*_API_KEY_FILE", "ORCHESTRATOR_MCP_SERVERS")) || uses(from, pullsModel)
		want(https, from, internet, 443, corev1.ProtocolTCP, "HTTPS only for model providers, the model pull and MCP servers")
		want(false, from, internet, 80, corev1.ProtocolTCP, "no plain HTTP out")
		want(false, from, private, 443, corev1.ProtocolTCP, "provider egress excludes private ranges")
		want(false, from, metadata, 80, corev1.ProtocolTCP, "no pod reads the cloud metadata service")
		// MongoDB (external, or the overlay's pod) for its users only.
		mongo := uses(from, hasEnv("MONGO_URI"))
		want(mongo, from, internet, 27017, corev1.ProtocolTCP, "MongoDB egress for its users only")
		for _, m := range byComp("mongo") {
			want(mongo, from, m, 27017, corev1.ProtocolTCP, "MongoDB for its users only")
		}
		// NATS for the services that use it, routes between its servers.
		for _, s := range byComp("nats") {
			want(uses(from, hasEnv("NATS_URL")), from, s, 4222, corev1.ProtocolTCP, "NATS clients are the services with NATS_URL")
			want(comp(from) == "nats", from, s, 6222, corev1.ProtocolTCP, "cluster routes between NATS servers only")
		}
		want(uses(from, hasEnv("SQLAGENT_CONNECTIONS")), from, internet, 5432, corev1.ProtocolTCP, "the SQL agent's databases")
	}
	// A pod no policy was written for (a debug pod, a later addition) is
	// closed both ways by the default deny.
	want(false, otherNS, stranger, 8080, corev1.ProtocolTCP, "a pod without its own policy takes no traffic")
	want(false, stranger, internet, 443, corev1.ProtocolTCP, "a pod without its own policy sends no traffic")
	for _, s := range byComp("nats") {
		want(false, stranger, s, 4222, corev1.ProtocolTCP, "NATS takes no client outside the mesh")
	}
	if len(byComp("nats")) == 0 {
		res.Violations = append(res.Violations, "no NATS pods to try")
	}
	res.Checked = count(len(pols), "NetworkPolicies") + ", " + count(tried, "connections tried")
	return res
}
