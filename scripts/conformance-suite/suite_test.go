// Package suite is the conformance test binary scripts/conformance runs: the upstream
// suite (sigs.k8s.io/gateway-api/conformance) with its usual flags, plus the options the
// stock binary has no flags for, taken from the environment:
//
//	WEIR_CONFORMANCE_USABLE_ADDRESS    an IP weir can serve a Gateway on (in its pool)
//	WEIR_CONFORMANCE_UNUSABLE_ADDRESS  an IP it cannot (outside the pool)
//
// They fill the suite's address placeholders (the GatewayStaticAddresses test).
package suite

import (
	"os"
	"testing"

	"sigs.k8s.io/gateway-api/apis/v1beta1"
	"sigs.k8s.io/gateway-api/conformance"
)

func addresses(env string) []v1beta1.GatewaySpecAddress {
	v := os.Getenv(env)
	if v == "" {
		return nil
	}
	ip := v1beta1.AddressType("IPAddress")
	return []v1beta1.GatewaySpecAddress{{Type: &ip, Value: v}}
}

func TestConformance(t *testing.T) {
	opts := conformance.DefaultOptions(t)
	opts.UsableNetworkAddresses = addresses("WEIR_CONFORMANCE_USABLE_ADDRESS")
	opts.UnusableNetworkAddresses = addresses("WEIR_CONFORMANCE_UNUSABLE_ADDRESS")
	conformance.RunConformanceWithOptions(t, opts)
}
