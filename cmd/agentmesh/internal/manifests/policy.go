package manifests

import (
	"fmt"
	"path"
	"sort"
	"strings"

	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation"
)

// Rules is what the policy needs to know besides the manifests.
type Rules struct {
	// EnvVars maps each service of the mesh (the last element of its image
	// name) to the environment variables its config struct reads.
	EnvVars map[string]map[string]bool
	// RuntimeVars are read by the Go runtime, not by a config struct
	// (GOMEMLIMIT), and allowed in every container of the mesh.
	RuntimeVars map[string]bool
	// Secrets maps each Secret the README documents to its keys, each
	// true when the Secret must hold it (false: optional).
	Secrets map[string]map[string]bool
	// NoHPA lists the stateless Deployments that have no autoscaler, each
	// with the reason.
	NoHPA map[string]string
	// GPU says vision's model server must run on GPU nodes with a GPU.
	GPU bool
	// InClusterMongo says the overlay runs its own single-node MongoDB;
	// otherwise MongoDB is external and no MongoDB workload may render.
	InClusterMongo bool
	// TempDirs lists the services that write temporary files (os.TempDir:
	// the indexer's PDFs for poppler's tools), each with what it writes:
	// their containers mount a writable /tmp, the root filesystem being
	// read-only.
	TempDirs map[string]string
}

// Result is one policy check: what it holds, how many things it looked at,
// and what broke it.
type Result struct {
	// Name states the rule.
	Name string
	// Checked counts what was looked at, e.g. "24 containers".
	Checked string
	// Violations name each object and what is wrong; empty when the rule holds.
	Violations []string
}

// Check holds the rendered objects of one overlay to the policy. Every
// result is returned, holding or not, so a caller can print the list.
func Check(objs []Object, r Rules) []Result {
	ws := workloads(objs)
	cs := containers(ws)
	c := &checker{objs: objs, ws: ws, cs: cs, r: r}
	return []Result{
		c.validNames(),
		c.probes(),
		c.meshProbes(),
		c.resources(),
		c.securityContext(),
		c.tempDirs(),
		c.podIsolation(),
		c.disruptionBudgets(),
		c.autoscalers(),
		c.topologySpread(),
		c.services(),
		c.envVars(),
		c.references(),
		c.secretFiles(),
		c.networkPolicies(),
		c.serviceMonitor(),
		c.nats(),
		c.vision(),
		c.mongo(),
	}
}

type checker struct {
	objs []Object
	ws   []*workload
	cs   []container
	r    Rules
}

func of[T any](objs []Object) []T {
	var out []T
	for _, o := range objs {
		if v, ok := o.Value.(T); ok {
			out = append(out, v)
		}
	}
	return out
}

func count(n int, what string) string { return fmt.Sprintf("%d %s", n, what) }

// validNames applies the API server's own syntax rules that a typed decode
// does not: DNS-1123 names, label syntax, IANA port names (at most 15
// characters, which a Service's targetPort must match), C identifiers for
// environment variables.
func (c *checker) validNames() Result {
	res := Result{Name: "object names, labels, port names and variable names pass the API server's syntax rules"}
	n := 0
	bad := func(what string, errs []string) {
		if len(errs) > 0 {
			res.Violations = append(res.Violations, what+": "+strings.Join(errs, "; "))
		}
	}
	for _, o := range c.objs {
		n++
		bad(o.ID()+" name", validation.IsDNS1123Subdomain(o.Name))
		if m, ok := meta(o); ok {
			for k, v := range m.Labels {
				bad(o.ID()+" label "+k, append(validation.IsQualifiedName(k), validation.IsValidLabelValue(v)...))
			}
		}
	}
	for _, ct := range c.cs {
		bad(ct.id()+" name", validation.IsDNS1123Label(ct.c.Name))
		for _, p := range ct.c.Ports {
			if p.Name != "" {
				bad(ct.id()+" port "+p.Name, validation.IsValidPortName(p.Name))
			}
		}
		for _, e := range ct.c.Env {
			bad(ct.id()+" env "+e.Name, validation.IsEnvVarName(e.Name))
		}
	}
	res.Checked = count(n, "objects") + ", " + count(len(c.cs), "containers")
	return res
}

func meta(o Object) (*metav1.ObjectMeta, bool) {
	type metaObject interface{ GetObjectMeta() metav1.Object }
	if m, ok := o.Value.(metaObject); ok {
		if om, ok := m.GetObjectMeta().(*metav1.ObjectMeta); ok {
			return om, true
		}
	}
	return nil, false
}

// probes: a container without readiness gets traffic before it serves;
// without liveness a wedged process is never restarted. A probe on a port
// the container does not declare probes nothing.
func (c *checker) probes() Result {
	res := Result{Name: "every container has a readiness and a liveness probe on a port it declares"}
	n := 0
	for _, ct := range c.cs {
		if ct.init {
			continue // Kubernetes allows run-to-completion init containers no probes
		}
		n++
		for _, p := range []struct {
			kind  string
			probe *corev1.Probe
		}{{"readiness", ct.c.ReadinessProbe}, {"liveness", ct.c.LivenessProbe}, {"startup", ct.c.StartupProbe}} {
			if p.probe == nil {
				if p.kind != "startup" {
					res.Violations = append(res.Violations, fmt.Sprintf("%s has no %s probe", ct.id(), p.kind))
				}
				continue
			}
			if msg := probePort(ct.c, p.probe); msg != "" {
				res.Violations = append(res.Violations, fmt.Sprintf("%s %s probe: %s", ct.id(), p.kind, msg))
			}
		}
	}
	res.Checked = count(n, "long-running containers")
	return res
}

func probePort(c *corev1.Container, p *corev1.Probe) string {
	var port intstr.IntOrString
	switch {
	case p.GRPC != nil:
		port = intstr.FromInt32(p.GRPC.Port)
	case p.HTTPGet != nil:
		port = p.HTTPGet.Port
	case p.TCPSocket != nil:
		port = p.TCPSocket.Port
	case p.Exec != nil:
		if len(p.Exec.Command) == 0 {
			return "exec probe without a command"
		}
		return ""
	default:
		return "no handler"
	}
	if port.Type == intstr.String {
		if !findPort(c, 0, port.StrVal) {
			return fmt.Sprintf("port %q is not a port of the container", port.StrVal)
		}
	} else if !findPort(c, port.IntVal, "") {
		return fmt.Sprintf("port %d is not a port of the container", port.IntVal)
	}
	return ""
}

// meshProbes: liveness never asks what readiness asks. Every gRPC service
// serves grpc.health.v1: readiness asks for the whole server (""), which
// follows its dependencies; liveness asks for "liveness"
// (grpcx.LivenessService), which does not, so a MongoDB outage takes pods
// out of Services without restarting them all. The gateway speaks HTTP:
// readiness /readyz (its backends), liveness /livez (the process).
func (c *checker) meshProbes() Result {
	res := Result{Name: `mesh services probe liveness apart from readiness: grpc.health.v1 (readiness "", liveness "liveness"); the gateway HTTP /readyz and /livez`}
	n := 0
	for _, ct := range c.cs {
		svc := meshService(ct.c.Image, c.r.EnvVars)
		if svc == "" || ct.init {
			continue
		}
		n++
		rp, lp := ct.c.ReadinessProbe, ct.c.LivenessProbe
		if rp == nil || lp == nil {
			continue // reported by probes()
		}
		if svc == "gateway" {
			if rp.HTTPGet == nil || rp.HTTPGet.Path != "/readyz" {
				res.Violations = append(res.Violations, fmt.Sprintf("%s readiness probe is not httpGet /readyz (its backends' health)", ct.id()))
			}
			if lp.HTTPGet == nil || lp.HTTPGet.Path != "/livez" {
				res.Violations = append(res.Violations, fmt.Sprintf("%s liveness probe is not httpGet /livez (/readyz follows the backends, and the kubelet would restart every gateway in an outage)", ct.id()))
			}
			continue
		}
		if rp.GRPC == nil || rp.GRPC.Service != nil && *rp.GRPC.Service != "" {
			res.Violations = append(res.Violations, fmt.Sprintf(`%s readiness probe is not grpc with service ""`, ct.id()))
		}
		if lp.GRPC == nil || lp.GRPC.Service == nil || *lp.GRPC.Service != "liveness" {
			res.Violations = append(res.Violations, fmt.Sprintf(`%s liveness probe is not grpc with service "liveness" (service "" turns NOT_SERVING while a dependency is down, and the kubelet would restart every pod)`, ct.id()))
		}
		if rp.GRPC != nil {
			addr := envValue(ct.c, "GRPC_ADDR")
			if !strings.HasSuffix(addr, fmt.Sprintf(":%d", rp.GRPC.Port)) || strings.HasPrefix(addr, "127.") || strings.HasPrefix(addr, "localhost") {
				res.Violations = append(res.Violations, fmt.Sprintf("%s probes gRPC port %d but GRPC_ADDR is %q (the kubelet probes the pod address)", ct.id(), rp.GRPC.Port, addr))
			}
		}
	}
	res.Checked = count(n, "mesh containers")
	return res
}

func envValue(c *corev1.Container, name string) string {
	for _, e := range c.Env {
		if e.Name == name {
			return e.Value
		}
	}
	return ""
}

// resources: requests let the scheduler place pods; limits keep one pod
// from starving its node (and set GOMAXPROCS and GOMEMLIMIT for Go).
func (c *checker) resources() Result {
	res := Result{Name: "every container requests and limits cpu and memory, requests within limits"}
	for _, ct := range c.cs {
		rq, lm := ct.c.Resources.Requests, ct.c.Resources.Limits
		for _, name := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
			q, okR := rq[name]
			l, okL := lm[name]
			switch {
			case !okR:
				res.Violations = append(res.Violations, fmt.Sprintf("%s requests no %s", ct.id(), name))
			case !okL:
				res.Violations = append(res.Violations, fmt.Sprintf("%s has no %s limit", ct.id(), name))
			case q.Cmp(l) > 0:
				res.Violations = append(res.Violations, fmt.Sprintf("%s requests %s %s above its limit %s", ct.id(), name, q.String(), l.String()))
			case q.IsZero():
				res.Violations = append(res.Violations, fmt.Sprintf("%s requests zero %s", ct.id(), name))
			}
		}
	}
	res.Checked = count(len(c.cs), "containers")
	return res
}

// securityContext: the restricted Pod Security Standard, per container,
// with the pod's settings as defaults the way the kubelet applies them.
func (c *checker) securityContext() Result {
	res := Result{Name: "every container: runAsNonRoot, non-zero UID, readOnlyRootFilesystem, no privilege escalation, drops ALL capabilities, seccomp RuntimeDefault"}
	for _, ct := range c.cs {
		pod := ct.w.pod.Spec.SecurityContext
		if pod == nil {
			pod = &corev1.PodSecurityContext{}
		}
		sc := ct.c.SecurityContext
		if sc == nil {
			sc = &corev1.SecurityContext{}
		}
		nonRoot := sc.RunAsNonRoot
		if nonRoot == nil {
			nonRoot = pod.RunAsNonRoot
		}
		uid := sc.RunAsUser
		if uid == nil {
			uid = pod.RunAsUser
		}
		seccomp := sc.SeccompProfile
		if seccomp == nil {
			seccomp = pod.SeccompProfile
		}
		var bad []string
		if nonRoot == nil || !*nonRoot {
			bad = append(bad, "runAsNonRoot is not true")
		}
		if uid != nil && *uid == 0 {
			bad = append(bad, "runAsUser is 0")
		}
		if sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
			bad = append(bad, "readOnlyRootFilesystem is not true")
		}
		if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
			bad = append(bad, "allowPrivilegeEscalation is not false")
		}
		if sc.Privileged != nil && *sc.Privileged {
			bad = append(bad, "privileged")
		}
		if sc.Capabilities == nil || !dropsAll(sc.Capabilities.Drop) {
			bad = append(bad, "capabilities do not drop ALL")
		} else if len(sc.Capabilities.Add) > 0 {
			bad = append(bad, fmt.Sprintf("adds capabilities %v", sc.Capabilities.Add))
		}
		if seccomp == nil || seccomp.Type != corev1.SeccompProfileTypeRuntimeDefault {
			bad = append(bad, "seccomp profile is not RuntimeDefault")
		}
		if len(bad) > 0 {
			res.Violations = append(res.Violations, ct.id()+": "+strings.Join(bad, ", "))
		}
	}
	res.Checked = count(len(c.cs), "containers")
	return res
}

// tempDirs: a service that writes temporary files mounts a writable /tmp
// (its root filesystem is read-only: os.MkdirTemp failed, and every PDF
// went unread).
func (c *checker) tempDirs() Result {
	res := Result{Name: "the services that write temporary files mount a writable /tmp"}
	n := 0
	for _, ct := range c.cs {
		svc := meshService(ct.c.Image, c.r.EnvVars)
		why, ok := c.r.TempDirs[svc]
		if !ok {
			continue
		}
		n++
		mounted := false
		for _, m := range ct.c.VolumeMounts {
			mounted = mounted || (m.MountPath == "/tmp" && !m.ReadOnly)
		}
		if !mounted {
			res.Violations = append(res.Violations, ct.id()+": no writable /tmp, where it writes "+why)
		}
	}
	res.Checked = count(n, "containers")
	return res
}

func dropsAll(caps []corev1.Capability) bool {
	for _, c := range caps {
		if c == "ALL" {
			return true
		}
	}
	return false
}

// podIsolation: no host namespaces or host paths, no API token (the mesh
// calls no Kubernetes API), and every writable mount is scratch or a
// volume the pod owns: with a read-only root that is where a process may
// write, and nowhere on the node.
func (c *checker) podIsolation() Result {
	res := Result{Name: "no pod shares host namespaces, mounts hostPath or a service account token; writable mounts are emptyDir or PVCs"}
	for _, w := range c.ws {
		s := w.pod.Spec
		if s.HostNetwork || s.HostPID || s.HostIPC {
			res.Violations = append(res.Violations, w.id()+" uses a host namespace")
		}
		if s.AutomountServiceAccountToken == nil || *s.AutomountServiceAccountToken {
			res.Violations = append(res.Violations, w.id()+" mounts a service account token (set automountServiceAccountToken: false)")
		}
		vols := map[string]corev1.Volume{}
		for _, v := range s.Volumes {
			vols[v.Name] = v
			if v.HostPath != nil {
				res.Violations = append(res.Violations, w.id()+" volume "+v.Name+" is a hostPath")
			}
		}
		for _, ct := range c.cs {
			if ct.w != w {
				continue
			}
			for _, m := range ct.c.VolumeMounts {
				v, ok := vols[m.Name]
				switch {
				case w.claims[m.Name]:
				case !ok:
					res.Violations = append(res.Violations, fmt.Sprintf("%s mounts %s, which is no volume of the pod", ct.id(), m.Name))
				case m.ReadOnly || v.Secret != nil || v.ConfigMap != nil || v.Projected != nil || v.DownwardAPI != nil:
				case v.EmptyDir != nil || v.PersistentVolumeClaim != nil || v.Ephemeral != nil:
				default:
					res.Violations = append(res.Violations, fmt.Sprintf("%s mounts %s writable, which is neither emptyDir nor a PVC", ct.id(), m.Name))
				}
			}
		}
	}
	res.Checked = count(len(c.ws), "workloads")
	return res
}

// disruptionBudgets: a drain must keep each workload serving, and must be
// able to finish: a budget that allows no eviction blocks node upgrades.
func (c *checker) disruptionBudgets() Result {
	res := Result{Name: "every Deployment and StatefulSet has a PodDisruptionBudget selecting its pods that still allows an eviction"}
	pdbs := of[*policyv1.PodDisruptionBudget](c.objs)
	for _, w := range c.ws {
		var found []*policyv1.PodDisruptionBudget
		for _, p := range pdbs {
			sel, err := metav1.LabelSelectorAsSelector(p.Spec.Selector)
			if err != nil || p.Spec.Selector == nil || sel.Empty() {
				continue
			}
			if sel.Matches(labels.Set(w.pod.Labels)) {
				found = append(found, p)
			}
		}
		switch {
		case len(found) == 0:
			res.Violations = append(res.Violations, w.id()+" has no PodDisruptionBudget")
		case len(found) > 1:
			res.Violations = append(res.Violations, fmt.Sprintf("%s is selected by %d PodDisruptionBudgets; the eviction API refuses pods with more than one", w.id(), len(found)))
		default:
			p := found[0].Spec
			if p.MaxUnavailable != nil && p.MaxUnavailable.Type == intstr.Int && p.MaxUnavailable.IntVal < 1 {
				res.Violations = append(res.Violations, w.id()+" PodDisruptionBudget allows no eviction (maxUnavailable < 1)")
			}
			if p.MinAvailable != nil && p.MinAvailable.Type == intstr.Int && p.MinAvailable.IntVal >= w.replicas {
				res.Violations = append(res.Violations, fmt.Sprintf("%s PodDisruptionBudget minAvailable %d allows no eviction of %d replicas", w.id(), p.MinAvailable.IntVal, w.replicas))
			}
		}
	}
	for _, p := range pdbs {
		if p.Spec.Selector == nil || len(p.Spec.Selector.MatchLabels)+len(p.Spec.Selector.MatchExpressions) == 0 {
			res.Violations = append(res.Violations, "PodDisruptionBudget/"+p.Name+" selects every pod of the namespace")
		}
	}
	res.Checked = count(len(c.ws), "workloads") + ", " + count(len(pdbs), "PodDisruptionBudgets")
	return res
}

// autoscalers: only a Deployment whose pods own no state may be scaled by
// load; StatefulSets (the indexer's volumes, NATS, MongoDB) are sized by
// hand.
func (c *checker) autoscalers() Result {
	res := Result{Name: "HorizontalPodAutoscalers scale stateless Deployments only, and every stateless Deployment has one or a stated reason"}
	hpas := of[*autoscalingv2.HorizontalPodAutoscaler](c.objs)
	byTarget := map[string]*autoscalingv2.HorizontalPodAutoscaler{}
	for _, h := range hpas {
		ref := h.Spec.ScaleTargetRef
		var target *workload
		for _, w := range c.ws {
			if w.kind == ref.Kind && w.name == ref.Name {
				target = w
			}
		}
		switch {
		case target == nil:
			res.Violations = append(res.Violations, fmt.Sprintf("HorizontalPodAutoscaler/%s targets %s/%s, which is not rendered", h.Name, ref.Kind, ref.Name))
			continue
		case target.stateful() || ref.APIVersion != "apps/v1":
			res.Violations = append(res.Violations, fmt.Sprintf("HorizontalPodAutoscaler/%s scales %s, which is not a stateless apps/v1 Deployment", h.Name, target.id()))
		}
		if h.Spec.MinReplicas == nil || *h.Spec.MinReplicas < 1 || *h.Spec.MinReplicas > h.Spec.MaxReplicas {
			res.Violations = append(res.Violations, fmt.Sprintf("HorizontalPodAutoscaler/%s: minReplicas must be set, at least 1 and at most maxReplicas %d", h.Name, h.Spec.MaxReplicas))
		}
		if len(h.Spec.Metrics) == 0 {
			res.Violations = append(res.Violations, "HorizontalPodAutoscaler/"+h.Name+" has no metrics")
		}
		for _, m := range h.Spec.Metrics {
			if m.Resource != nil {
				for _, ct := range c.cs {
					if ct.w == target {
						if _, ok := ct.c.Resources.Requests[m.Resource.Name]; !ok {
							res.Violations = append(res.Violations, fmt.Sprintf("HorizontalPodAutoscaler/%s scales on %s utilization but %s requests none", h.Name, m.Resource.Name, ct.id()))
						}
					}
				}
			}
		}
		byTarget[target.id()] = h
	}
	for _, w := range c.ws {
		if w.stateful() || byTarget[w.id()] != nil {
			continue
		}
		if _, ok := c.r.NoHPA[w.name]; !ok {
			res.Violations = append(res.Violations, w.id()+" is stateless but has no HorizontalPodAutoscaler (or a reason in Rules.NoHPA)")
		}
	}
	res.Checked = count(len(hpas), "HorizontalPodAutoscalers") + ", " + count(len(c.ws), "workloads")
	return res
}

// topologySpread: replicas on one node or zone fall together.
func (c *checker) topologySpread() Result {
	res := Result{Name: "every workload spreads its pods over nodes (topologySpreadConstraints selecting its own pods)"}
	for _, w := range c.ws {
		hosts := false
		for _, t := range w.pod.Spec.TopologySpreadConstraints {
			sel, err := metav1.LabelSelectorAsSelector(t.LabelSelector)
			if err != nil || t.LabelSelector == nil || sel.Empty() || !sel.Matches(labels.Set(w.pod.Labels)) {
				res.Violations = append(res.Violations, fmt.Sprintf("%s spread over %s does not select its own pods", w.id(), t.TopologyKey))
				continue
			}
			if t.TopologyKey == corev1.LabelHostname {
				hosts = true
			}
		}
		if !hosts {
			res.Violations = append(res.Violations, w.id()+" does not spread over "+corev1.LabelHostname)
		}
	}
	res.Checked = count(len(c.ws), "workloads")
	return res
}

// services: a Service that selects nothing, or targets a port name no pod
// has, routes nowhere without any error.
func (c *checker) services() Result {
	res := Result{Name: "every Service selects a workload's pods and targets ports they declare"}
	svcs := of[*corev1.Service](c.objs)
	for _, s := range svcs {
		var target *workload
		for _, w := range c.ws {
			if selectsAll(s.Spec.Selector, w.pod.Labels) {
				target = w
			}
		}
		if target == nil {
			res.Violations = append(res.Violations, "Service/"+s.Name+" selects no workload's pods")
			continue
		}
		for _, p := range s.Spec.Ports {
			tp := p.TargetPort
			if tp.Type == intstr.Int && tp.IntVal == 0 {
				tp = intstr.FromInt32(p.Port)
			}
			ok := false
			for _, ct := range c.cs {
				if ct.w == target && findPort(ct.c, tp.IntVal, tp.StrVal) {
					ok = true
				}
			}
			if !ok {
				res.Violations = append(res.Violations, fmt.Sprintf("Service/%s port %s targets %s, which no container of %s declares", s.Name, p.Name, tp.String(), target.id()))
			}
		}
	}
	res.Checked = count(len(svcs), "Services")
	return res
}

// envVars: a variable that no config struct reads is a typo that sits
// unnoticed while a default happens to be right. envFrom ConfigMaps count
// key by key.
func (c *checker) envVars() Result {
	res := Result{Name: "every environment variable of a mesh container (env and envFrom) is read by that service's config struct"}
	cms := configMaps(c.objs)
	n, vars := 0, 0
	for _, ct := range c.cs {
		svc := meshService(ct.c.Image, c.r.EnvVars)
		if svc == "" {
			continue
		}
		n++
		known := c.r.EnvVars[svc]
		check := func(name, from string) {
			vars++
			if !known[name] && !c.r.RuntimeVars[name] {
				res.Violations = append(res.Violations, fmt.Sprintf("%s sets %s%s, which %s's config does not read", ct.id(), name, from, svc))
			}
		}
		for _, e := range ct.c.Env {
			check(e.Name, "")
		}
		for _, ef := range ct.c.EnvFrom {
			if ef.ConfigMapRef == nil {
				res.Violations = append(res.Violations, ct.id()+" takes envFrom something other than a ConfigMap")
				continue
			}
			cm, ok := cms[ef.ConfigMapRef.Name]
			if !ok {
				continue // reported by references()
			}
			keys := make([]string, 0, len(cm.Data))
			for k := range cm.Data {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			for _, k := range keys {
				check(ef.Prefix+k, " (envFrom ConfigMap "+cm.Name+")")
			}
		}
	}
	res.Checked = count(n, "mesh containers") + ", " + count(vars, "variables")
	return res
}

func configMaps(objs []Object) map[string]*corev1.ConfigMap {
	out := map[string]*corev1.ConfigMap{}
	for _, cm := range of[*corev1.ConfigMap](objs) {
		out[cm.Name] = cm
	}
	return out
}

// references: a ConfigMap reference must resolve in the render; a Secret
// is created by the operator, so its name and key must be ones README.md
// tells the operator to create, and a Secret the overlay itself renders
// (dev) must hold exactly documented keys.
func (c *checker) references() Result {
	res := Result{Name: "every ConfigMap reference resolves; every Secret reference (env, volume) is a Secret and key README.md documents"}
	cms := configMaps(c.objs)
	n := 0
	secretKey := func(where, name, key string) {
		n++
		keys, ok := c.r.Secrets[name]
		switch {
		case !ok:
			res.Violations = append(res.Violations, fmt.Sprintf("%s uses Secret %s, which README.md does not document", where, name))
		case key != "" && !documented(keys, key):
			res.Violations = append(res.Violations, fmt.Sprintf("%s uses key %s of Secret %s, which README.md does not document", where, key, name))
		}
	}
	cmKey := func(where, name, key string) {
		n++
		cm, ok := cms[name]
		if !ok {
			res.Violations = append(res.Violations, fmt.Sprintf("%s uses ConfigMap %s, which is not rendered", where, name))
			return
		}
		if _, ok := cm.Data[key]; key != "" && !ok {
			res.Violations = append(res.Violations, fmt.Sprintf("%s uses key %s of ConfigMap %s, which it does not have", where, key, name))
		}
	}
	for _, ct := range c.cs {
		for _, e := range ct.c.Env {
			if e.ValueFrom == nil {
				continue
			}
			if r := e.ValueFrom.SecretKeyRef; r != nil {
				secretKey(ct.id()+" "+e.Name, r.Name, r.Key)
			}
			if r := e.ValueFrom.ConfigMapKeyRef; r != nil {
				cmKey(ct.id()+" "+e.Name, r.Name, r.Key)
			}
		}
		for _, ef := range ct.c.EnvFrom {
			if ef.ConfigMapRef != nil {
				cmKey(ct.id()+" envFrom", ef.ConfigMapRef.Name, "")
			}
			if ef.SecretRef != nil {
				secretKey(ct.id()+" envFrom", ef.SecretRef.Name, "")
			}
		}
	}
	for _, w := range c.ws {
		for _, v := range w.pod.Spec.Volumes {
			if v.Secret != nil {
				secretKey(w.id()+" volume "+v.Name, v.Secret.SecretName, "")
				for _, it := range v.Secret.Items {
					secretKey(w.id()+" volume "+v.Name, v.Secret.SecretName, it.Key)
				}
			}
			if v.ConfigMap != nil {
				cmKey(w.id()+" volume "+v.Name, v.ConfigMap.Name, "")
				for _, it := range v.ConfigMap.Items {
					cmKey(w.id()+" volume "+v.Name, v.ConfigMap.Name, it.Key)
				}
			}
		}
	}
	for _, s := range of[*corev1.Secret](c.objs) {
		keys, ok := c.r.Secrets[s.Name]
		if !ok {
			res.Violations = append(res.Violations, "Secret/"+s.Name+" is rendered but README.md does not document it")
			continue
		}
		for k, required := range keys {
			if !required {
				continue
			}
			_, inData := s.Data[k]
			_, inString := s.StringData[k]
			if !inData && !inString {
				res.Violations = append(res.Violations, fmt.Sprintf("Secret/%s lacks documented key %s", s.Name, k))
			}
		}
		for k := range s.Data {
			if !documented(keys, k) {
				res.Violations = append(res.Violations, fmt.Sprintf("Secret/%s has key %s, which README.md does not document", s.Name, k))
			}
		}
	}
	res.Checked = count(n, "references")
	return res
}

// secretFiles: the model gateway reads *_API_KEY_FILE at start and stops
// when the file is missing; the file must come from a mounted Secret that
// always has that key (not optional, no items that may skip it).
func (c *checker) secretFiles() Result {
	res := Result{Name: "every *_FILE variable names a file that a mounted, non-optional Secret or ConfigMap always holds"}
	n := 0
	for _, ct := range c.cs {
		vols := map[string]corev1.Volume{}
		for _, v := range ct.w.pod.Spec.Volumes {
			vols[v.Name] = v
		}
		for _, e := range ct.c.Env {
			if !strings.HasSuffix(e.Name, "_FILE") && e.Name != "MODELGATEWAY_CONFIG" {
				continue
			}
			n++
			file := e.Value
			ok := false
			for _, m := range ct.c.VolumeMounts {
				rel, inside := strings.CutPrefix(file, strings.TrimRight(m.MountPath, "/")+"/")
				if !inside || strings.Contains(rel, "/") {
					continue
				}
				v := vols[m.Name]
				switch {
				case v.Secret != nil:
					if v.Secret.Optional != nil && *v.Secret.Optional {
						res.Violations = append(res.Violations, fmt.Sprintf("%s %s: Secret volume %s is optional, so the file may be missing and the start fails", ct.id(), e.Name, m.Name))
					}
					key := itemKey(rel, v.Secret.Items)
					ok = hasItem(rel, v.Secret.Items) && c.r.Secrets[v.Secret.SecretName][key]
					if documented(c.r.Secrets[v.Secret.SecretName], key) && !ok {
						res.Violations = append(res.Violations, fmt.Sprintf("%s %s: key %s of Secret %s is optional, so the file may be missing and the start fails", ct.id(), e.Name, key, v.Secret.SecretName))
					}
				case v.ConfigMap != nil:
					cm, found := configMaps(c.objs)[v.ConfigMap.Name]
					_, has := cm.Data[itemKey(rel, v.ConfigMap.Items)]
					ok = found && hasItem(rel, v.ConfigMap.Items) && has
				}
			}
			if !ok {
				res.Violations = append(res.Violations, fmt.Sprintf("%s %s=%s is no documented key of a Secret or ConfigMap mounted in the container", ct.id(), e.Name, file))
			}
		}
	}
	res.Checked = count(n, "file variables")
	return res
}

func documented(keys map[string]bool, key string) bool {
	_, ok := keys[key]
	return ok
}

func hasItem(file string, items []corev1.KeyToPath) bool {
	if len(items) == 0 {
		return true
	}
	for _, it := range items {
		if it.Path == file {
			return true
		}
	}
	return false
}

func itemKey(file string, items []corev1.KeyToPath) string {
	for _, it := range items {
		if it.Path == file {
			return it.Key
		}
	}
	return path.Base(file)
}

// serviceMonitor: Prometheus finds every mesh Service's metrics port.
func (c *checker) serviceMonitor() Result {
	res := Result{Name: "a ServiceMonitor scrapes /metrics from a port of every gateway and service Service"}
	mons := monitors(c.objs)
	svcs := of[*corev1.Service](c.objs)
	n := 0
	for _, s := range svcs {
		comp := s.Labels["app.kubernetes.io/component"]
		if comp != "service" && comp != "gateway" {
			continue
		}
		n++
		scraped := false
		for _, m := range mons {
			if !m.selects(s.Labels) {
				continue
			}
			for _, p := range s.Spec.Ports {
				if m.ports[p.Name] == "/metrics" {
					scraped = true
				}
			}
		}
		if !scraped {
			res.Violations = append(res.Violations, "Service/"+s.Name+" has no port a ServiceMonitor scrapes at /metrics")
		}
	}
	if len(mons) == 0 {
		res.Violations = append(res.Violations, "no ServiceMonitor is rendered")
	}
	res.Checked = count(n, "Services") + ", " + count(len(mons), "ServiceMonitors")
	return res
}
