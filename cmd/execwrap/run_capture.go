package main

import (
	"errors"
	"fmt"

	"github.com/netproxy/netproxy/sandbox"
)

// Values of --capture (SPEC §6.6, docs/sandbox.md "Transparent capture").
const (
	captureOff = "off"
	captureOn  = "on"
)

// errCaptureIncomplete is what --capture on gets until TCP capture is in:
// the in-sandbox resolver alone would hand out pool addresses that lead
// nowhere, so the run is refused rather than half-captured.
var errCaptureIncomplete = errors.New("--capture on: transparent capture is experimental and not complete in this build " +
	"(its resolver is built but not yet served in the sandbox, and TCP capture into netproxy does not exist yet): " +
	"drop --capture (the proxy variables keep working) and see docs/sandbox.md §4 \"Transparent capture\"")

// settleCapture validates --capture against the network mode and tier it
// needs (proxied, namespaces: the landlock tier has no network namespace
// to capture in).
func settleCapture(value, network, tier string) error {
	switch value {
	case captureOff:
		return nil
	case captureOn:
	default:
		return fmt.Errorf("--capture %q: want on or off", value)
	}
	if network != string(sandbox.NetworkProxied) {
		return fmt.Errorf("--capture on needs --network proxied (got %s): capture sends connections to netproxy", network)
	}
	if tier == string(sandbox.TierLandlock) {
		return errors.New("--capture on: unavailable in the landlock tier (no network namespace to capture in); use --tier namespaces or drop --capture")
	}
	return errCaptureIncomplete
}

// captureDoctorState is what `execwrap doctor` says about capture: it says
// so plainly until the mechanism works end to end.
const captureDoctorState = "unavailable in this build (experimental, incomplete: docs/sandbox.md §4); programs that ignore HTTP(S)_PROXY have no network"
