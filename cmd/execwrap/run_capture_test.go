package main

import (
	"strings"
	"testing"
)

func TestSettleCapture(t *testing.T) {
	for _, c := range []struct {
		value, network, tier string
		capture, required    bool
		want                 string // "" → accepted; else a substring of the error
	}{
		{"", "proxied", "auto", true, false, ""},
		{"", "proxied", "namespaces", true, false, ""},
		{"", "proxied", "landlock", false, false, ""},
		{"", "none", "auto", false, false, ""},
		{"off", "proxied", "auto", false, false, ""},
		{"off", "none", "landlock", false, false, ""},
		{"on", "proxied", "auto", true, true, ""},
		{"on", "proxied", "namespaces", true, true, ""},
		{"on", "none", "auto", false, false, "needs --network proxied"},
		{"on", "proxied", "landlock", false, false, "landlock tier"},
		{"yes", "proxied", "auto", false, false, "want on or off"},
	} {
		capture, required, err := settleCapture(c.value, c.network, c.tier)
		if (err == nil) != (c.want == "") || (err != nil && !strings.Contains(err.Error(), c.want)) ||
			capture != c.capture || required != c.required {
			t.Errorf("settleCapture(%q, %q, %q) = %v, %v, %v; want %v, %v, %q", c.value, c.network, c.tier,
				capture, required, err, c.capture, c.required, c.want)
		}
	}
}

// TestCaptureFlagDefault: without --capture a proxied run captures, a
// --network none run does not.
func TestCaptureFlagDefault(t *testing.T) {
	_, ro, err := parseRunFlags([]string{"--network", "none", "--", "true"}, strings.NewReader(""))
	if err != nil {
		t.Fatal(err)
	}
	if ro.captureOn {
		t.Fatal("--network none: capture on")
	}
	_, ro, err = parseRunFlags([]string{"--", "true"}, strings.NewReader(""))
	if err != nil {
		t.Fatal(err)
	}
	if !ro.captureOn || ro.captureRequired {
		t.Fatalf("default proxied run: capture %v required %v, want on, not required", ro.captureOn, ro.captureRequired)
	}
}
