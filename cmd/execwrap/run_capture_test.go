package main

import (
	"errors"
	"strings"
	"testing"
)

func TestSettleCapture(t *testing.T) {
	for _, c := range []struct {
		value, network, tier string
		want                 string // "" → accepted; else a substring of the error
	}{
		{"off", "proxied", "auto", ""},
		{"off", "none", "landlock", ""},
		{"on", "none", "auto", "needs --network proxied"},
		{"on", "proxied", "landlock", "landlock tier"},
		{"on", "proxied", "namespaces", "not complete"},
		{"on", "proxied", "auto", "not complete"},
		{"yes", "proxied", "auto", "want on or off"},
	} {
		err := settleCapture(c.value, c.network, c.tier)
		if (err == nil) != (c.want == "") || (err != nil && !strings.Contains(err.Error(), c.want)) {
			t.Errorf("settleCapture(%q, %q, %q) = %v, want %q", c.value, c.network, c.tier, err, c.want)
		}
	}
	if err := settleCapture("on", "proxied", "auto"); !errors.Is(err, errCaptureIncomplete) {
		t.Errorf("on: %v, want errCaptureIncomplete until TCP capture exists", err)
	}
}

// TestCaptureFlagDefaultOff: a run without --capture parses with capture
// off, so every existing run is unchanged.
func TestCaptureFlagDefaultOff(t *testing.T) {
	_, ro, err := parseRunFlags([]string{"--network", "none", "--", "true"}, strings.NewReader(""))
	if err != nil {
		t.Fatal(err)
	}
	if ro.capture != captureOff {
		t.Fatalf("default --capture = %q, want off", ro.capture)
	}
	if _, _, err := parseRunFlags([]string{"--capture", "on", "--", "true"}, strings.NewReader("")); !errors.Is(err, errCaptureIncomplete) {
		t.Fatalf("--capture on: %v, want it refused as incomplete", err)
	}
}
