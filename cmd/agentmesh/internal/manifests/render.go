// Package manifests renders the Kubernetes manifests under deploy/k8s with
// kustomize (in-process, no network), decodes every object strictly into
// its Kubernetes API type, and checks the result against the deployment
// policy the mesh promises a platform team (see Check).
package manifests

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sort"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
)

// Object is one rendered Kubernetes object, decoded into its API type
// (*appsv1.Deployment, *corev1.Service, ...).
type Object struct {
	// Kind and APIVersion are as written in the manifest.
	Kind, APIVersion string
	// Name and Namespace are the object's metadata.
	Name, Namespace string
	// Value is a pointer to the typed object.
	Value any
}

// ID names the object as kubectl does: kind/name.
func (o Object) ID() string { return o.Kind + "/" + o.Name }

// kinds maps apiVersion/kind to a constructor of the typed object. A kind
// not listed is an error: the policy only holds for what it knows.
var kinds = map[string]func() any{
	"v1/ConfigMap":                            func() any { return &corev1.ConfigMap{} },
	"v1/Secret":                               func() any { return &corev1.Secret{} },
	"v1/Service":                              func() any { return &corev1.Service{} },
	"v1/ServiceAccount":                       func() any { return &corev1.ServiceAccount{} },
	"apps/v1/Deployment":                      func() any { return &appsv1.Deployment{} },
	"apps/v1/StatefulSet":                     func() any { return &appsv1.StatefulSet{} },
	"policy/v1/PodDisruptionBudget":           func() any { return &policyv1.PodDisruptionBudget{} },
	"autoscaling/v2/HorizontalPodAutoscaler":  func() any { return &autoscalingv2.HorizontalPodAutoscaler{} },
	"networking.k8s.io/v1/NetworkPolicy":      func() any { return &networkingv1.NetworkPolicy{} },
	"monitoring.coreos.com/v1/ServiceMonitor": func() any { return &monitoringv1.ServiceMonitor{} },
}

// Render runs `kustomize build dir` in-process on the real file system,
// with kustomize's defaults (root-only load restrictions, no plugins, no
// Helm), and returns the objects as JSON documents in kustomize's order.
func Render(dir string) ([][]byte, error) {
	k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	m, err := k.Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		return nil, fmt.Errorf("manifests: kustomize build %s: %w", dir, err)
	}
	var docs [][]byte
	for _, r := range m.Resources() {
		b, err := r.MarshalJSON()
		if err != nil {
			return nil, fmt.Errorf("manifests: %s: %w", r.CurId(), err)
		}
		docs = append(docs, b)
	}
	return docs, nil
}

// Decode decodes JSON documents strictly: every object's apiVersion/kind
// must be one the policy knows, and a field the Kubernetes type does not
// have (a misspelt readinessProbe, a field at the wrong level) is an error,
// where kubectl apply would drop or reject it.
func Decode(docs [][]byte) ([]Object, error) {
	var out []Object
	for i, doc := range docs {
		var meta struct {
			APIVersion string `json:"apiVersion"`
			Kind       string `json:"kind"`
			Metadata   struct {
				Name      string `json:"name"`
				Namespace string `json:"namespace"`
			} `json:"metadata"`
		}
		if err := json.Unmarshal(doc, &meta); err != nil {
			return nil, fmt.Errorf("manifests: document %d: %w", i, err)
		}
		newObj, ok := kinds[meta.APIVersion+"/"+meta.Kind]
		if !ok {
			return nil, fmt.Errorf("manifests: %s %s: apiVersion/kind is not one the policy checks (known: %v)", meta.APIVersion, meta.Kind, knownKinds())
		}
		v := newObj()
		dec := json.NewDecoder(bytes.NewReader(doc))
		dec.DisallowUnknownFields()
		if err := dec.Decode(v); err != nil {
			return nil, fmt.Errorf("manifests: %s/%s: %w", meta.Kind, meta.Metadata.Name, err)
		}
		out = append(out, Object{Kind: meta.Kind, APIVersion: meta.APIVersion, Name: meta.Metadata.Name, Namespace: meta.Metadata.Namespace, Value: v})
	}
	return out, nil
}

func knownKinds() []string {
	var ks []string
	for k := range kinds {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}
