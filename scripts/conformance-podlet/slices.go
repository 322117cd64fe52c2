// EndpointSlices for Services with a selector, as the EndpointSlice controller writes them.

package main

import (
	"context"
	"log"
	"sort"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// reconcileSlices writes one EndpointSlice per Service with a selector.
func (p *podlet) reconcileSlices(ctx context.Context) error {
	svcs, err := p.cs.CoreV1().Services("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	pods, err := p.cs.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	slices, err := p.cs.DiscoveryV1().EndpointSlices("").List(ctx, metav1.ListOptions{
		LabelSelector: "endpointslice.kubernetes.io/managed-by=" + managedBy,
	})
	if err != nil {
		return err
	}
	existing := map[string]*discoveryv1.EndpointSlice{}
	for i := range slices.Items {
		s := &slices.Items[i]
		existing[s.Namespace+"/"+s.Name] = s
	}
	seen := map[string]bool{}
	for i := range svcs.Items {
		svc := &svcs.Items[i]
		if len(svc.Spec.Selector) == 0 || svc.DeletionTimestamp != nil {
			continue
		}
		sel := labels.SelectorFromSet(svc.Spec.Selector)
		var eps []discoveryv1.Endpoint
		for j := range pods.Items {
			pd := &pods.Items[j]
			if pd.Namespace != svc.Namespace || pd.Status.PodIP == "" || !sel.Matches(labels.Set(pd.Labels)) || !podReady(pd) || pd.DeletionTimestamp != nil {
				continue
			}
			eps = append(eps, discoveryv1.Endpoint{
				Addresses:  []string{pd.Status.PodIP},
				Conditions: discoveryv1.EndpointConditions{Ready: ptr(true), Serving: ptr(true), Terminating: ptr(false)},
				NodeName:   ptr(pd.Spec.NodeName),
				TargetRef:  &corev1.ObjectReference{Kind: "Pod", Namespace: pd.Namespace, Name: pd.Name, UID: pd.UID},
			})
		}
		sort.Slice(eps, func(a, b int) bool { return eps[a].Addresses[0] < eps[b].Addresses[0] })
		var ports []discoveryv1.EndpointPort
		for _, sp := range svc.Spec.Ports {
			target := sp.Port
			if sp.TargetPort.Type == intstr.Int && sp.TargetPort.IntVal != 0 {
				target = sp.TargetPort.IntVal
			}
			ports = append(ports, discoveryv1.EndpointPort{
				Name: ptr(sp.Name), Protocol: ptr(sp.Protocol), Port: ptr(target), AppProtocol: sp.AppProtocol,
			})
		}
		name := svc.Name + "-" + p.opts.prefix
		key := svc.Namespace + "/" + name
		seen[key] = true
		want := &discoveryv1.EndpointSlice{
			ObjectMeta: metav1.ObjectMeta{
				Name:      name,
				Namespace: svc.Namespace,
				Labels: map[string]string{
					discoveryv1.LabelServiceName: svc.Name,
					discoveryv1.LabelManagedBy:   managedBy,
				},
				OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Service", Name: svc.Name, UID: svc.UID}},
			},
			AddressType: discoveryv1.AddressTypeIPv4,
			Endpoints:   eps,
			Ports:       ports,
		}
		if old, ok := existing[key]; ok {
			if sameSlice(old, want) {
				continue
			}
			want.ResourceVersion = old.ResourceVersion
			if _, err := p.cs.DiscoveryV1().EndpointSlices(svc.Namespace).Update(ctx, want, metav1.UpdateOptions{}); err != nil {
				log.Printf("endpointslice %s: %v", key, err)
			}
			continue
		}
		if _, err := p.cs.DiscoveryV1().EndpointSlices(svc.Namespace).Create(ctx, want, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			log.Printf("endpointslice %s: %v", key, err)
		} else {
			log.Printf("endpointslice %s: %d endpoints", key, len(eps))
		}
	}
	for key, s := range existing {
		if !seen[key] {
			_ = p.cs.DiscoveryV1().EndpointSlices(s.Namespace).Delete(ctx, s.Name, metav1.DeleteOptions{})
		}
	}
	return nil
}

func sameSlice(a, b *discoveryv1.EndpointSlice) bool {
	return equality.Semantic.DeepEqual(a.Endpoints, b.Endpoints) && equality.Semantic.DeepEqual(a.Ports, b.Ports) &&
		len(a.OwnerReferences) == 1 && a.OwnerReferences[0].UID == b.OwnerReferences[0].UID
}

func podReady(pd *corev1.Pod) bool {
	for _, c := range pd.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}
