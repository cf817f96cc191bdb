package manifests

import (
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
)

// workload is a Deployment or StatefulSet: what the policy reads of both.
type workload struct {
	kind, name string
	replicas   int32
	pod        *corev1.PodTemplateSpec
	// claims are the StatefulSet's volumeClaimTemplates' names.
	claims map[string]bool
}

func (w *workload) id() string { return w.kind + "/" + w.name }

// stateful reports whether the pods own persistent volumes.
func (w *workload) stateful() bool { return w.kind == "StatefulSet" }

func workloads(objs []Object) []*workload {
	var out []*workload
	for _, o := range objs {
		switch v := o.Value.(type) {
		case *appsv1.Deployment:
			out = append(out, &workload{kind: o.Kind, name: o.Name, replicas: replicas(v.Spec.Replicas), pod: &v.Spec.Template})
		case *appsv1.StatefulSet:
			w := &workload{kind: o.Kind, name: o.Name, replicas: replicas(v.Spec.Replicas), pod: &v.Spec.Template, claims: map[string]bool{}}
			for _, c := range v.Spec.VolumeClaimTemplates {
				w.claims[c.Name] = true
			}
			out = append(out, w)
		}
	}
	return out
}

func replicas(r *int32) int32 {
	if r == nil {
		return 1 // the API server's default
	}
	return *r
}

// container is one container of a workload with where it sits.
type container struct {
	w *workload
	c *corev1.Container
	// init is a run-to-completion init container (not a native sidecar):
	// Kubernetes allows it no probes.
	init bool
}

func (c container) id() string { return c.w.id() + " container " + c.c.Name }

func containers(ws []*workload) []container {
	var out []container
	for _, w := range ws {
		for i := range w.pod.Spec.InitContainers {
			c := &w.pod.Spec.InitContainers[i]
			sidecar := c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways
			out = append(out, container{w: w, c: c, init: !sidecar})
		}
		for i := range w.pod.Spec.Containers {
			out = append(out, container{w: w, c: &w.pod.Spec.Containers[i]})
		}
	}
	return out
}

// meshService returns the service an image of the mesh runs ("gateway",
// "vision", ...), or "" for any other image. Images are
// [registry/]agentmesh/<service>[:tag][@digest], as `make images` names
// them and the overlays retag them.
func meshService(image string, known map[string]map[string]bool) string {
	if i := strings.Index(image, "@"); i >= 0 {
		image = image[:i]
	}
	if i := strings.LastIndex(image, ":"); i > strings.LastIndex(image, "/") {
		image = image[:i]
	}
	parts := strings.Split(image, "/")
	if len(parts) < 2 || parts[len(parts)-2] != "agentmesh" {
		return ""
	}
	if _, ok := known[parts[len(parts)-1]]; !ok {
		return ""
	}
	return parts[len(parts)-1]
}

// selects reports whether a label selector (as matchLabels) matches labels;
// an empty selector matches nothing here, since every selector of ours
// must name what it selects.
func selectsAll(sel, labels map[string]string) bool {
	if len(sel) == 0 {
		return false
	}
	for k, v := range sel {
		if labels[k] != v {
			return false
		}
	}
	return true
}

// findPort resolves a port (number or name) among a container's ports.
func findPort(c *corev1.Container, num int32, name string) bool {
	for _, p := range c.Ports {
		if (name != "" && p.Name == name) || (name == "" && p.ContainerPort == num) {
			return true
		}
	}
	return false
}
