package main

import (
	"errors"
	"fmt"

	"github.com/netproxy/netproxy/sandbox"
)

// Values of --capture (SPEC §6.6, docs/sandbox.md "Transparent capture").
// Without the flag capture is on wherever it can work (the namespaces tier
// with --network proxied) and silently off elsewhere; an explicit `on`
// fails a run that cannot capture.
const (
	captureDefault = ""
	captureOff     = "off"
	captureOn      = "on"
)

// settleCapture validates --capture against the network mode and tier and
// says whether to capture and whether capture is required.
func settleCapture(value, network, tier string) (capture, required bool, err error) {
	switch value {
	case captureOff:
		return false, false, nil
	case captureDefault:
		return network == string(sandbox.NetworkProxied) && tier != string(sandbox.TierLandlock), false, nil
	case captureOn:
	default:
		return false, false, fmt.Errorf("--capture %q: want on or off", value)
	}
	if network != string(sandbox.NetworkProxied) {
		return false, false, fmt.Errorf("--capture on needs --network proxied (got %s): capture sends connections to netproxy", network)
	}
	if tier == string(sandbox.TierLandlock) {
		return false, false, errors.New("--capture on: unavailable in the landlock tier (no network namespace to capture in); use --tier namespaces or drop --capture")
	}
	return true, true, nil
}

// nodeEnvProxyNote is doctor's line on Node: which versions honour the
// NODE_USE_ENV_PROXY=1 that execwrap sets (from Node's release notes:
// fetch and http/https in 24.5.0, both backported to 22.21.0), and that
// capture covers the rest.
const nodeEnvProxyNote = "honoured by Node >= 24.5 and >= 22.21 (fetch, http, https); older Node (Debian's 20) ignores it: " +
	"its connections reach netproxy only through transparent capture"

// captureDoctorText is doctor's line on capture, from a real build of it.
func captureDoctorText(p sandbox.TierProbe) string {
	if p.OK {
		return "works (namespaces tier, --network proxied; default on, --capture off disables; setup " + p.Duration + ")"
	}
	return "UNAVAILABLE: " + p.Error + " (programs that ignore HTTP(S)_PROXY have no network; the landlock tier never captures)"
}
