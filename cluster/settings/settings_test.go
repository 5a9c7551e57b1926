package settings

import (
	"strings"
	"testing"
)

func TestParseURL(t *testing.T) {
	for _, ok := range []string{"redis://127.0.0.1:6379/0", "rediss://u:p@h:6380/1", "redis-sentinel://h:26379?master_name=m&addr=h2:26379"} {
		if _, err := ParseURL(ok); err != nil {
			t.Errorf("%s: %v", ok, err)
		}
	}
	for _, bad := range []string{"127.0.0.1:6379", "http://h", "redis://h:6379/notanumber", "redis-sentinel://h:26379", "redis://:s3cret@h:6379/x"} {
		_, err := ParseURL(bad)
		if err == nil {
			t.Errorf("%s: accepted", bad)
			continue
		}
		if strings.Contains(err.Error(), "s3cret") {
			t.Errorf("%s: error shows the password: %v", bad, err)
		}
	}
}

func TestValidate(t *testing.T) {
	if errs := (Settings{}).Validate(); errs != nil {
		t.Fatalf("off: %v", errs)
	}
	errs := Settings{Redis: "nope://x", NodeID: "a b", KeyPrefix: "x y"}.Validate()
	var keys []string
	for _, e := range errs {
		keys = append(keys, e.Key)
	}
	if strings.Join(keys, " ") != "redis node_id key_file key_prefix" {
		t.Fatalf("keys %v", keys)
	}
	s := Settings{Redis: "redis://h"}.WithDefaults()
	if s.NodeID == "" || s.KeyPrefix != DefaultKeyPrefix {
		t.Fatalf("defaults %+v", s)
	}
}

func TestValidateAccess(t *testing.T) {
	base := Settings{Redis: "rediss://h:6380/0", KeyFile: "k"}
	for _, tc := range []struct {
		name string
		mod  func(*Settings)
		want string
	}{
		{"tls ok", func(s *Settings) { s.TLSCAFile, s.TLSCertFile, s.TLSKeyFile = "ca", "c", "k" }, ""},
		{"system roots", func(s *Settings) {}, ""},
		{"cert without key", func(s *Settings) { s.TLSCertFile = "c" }, "tls_key_file"},
		{"key without cert", func(s *Settings) { s.TLSKeyFile = "k" }, "tls_cert_file"},
		{"tls on redis://", func(s *Settings) { s.Redis = "redis://h"; s.TLSCAFile = "ca" }, "tls_ca_file"},
		{"password_env", func(s *Settings) { s.PasswordEnv = "REDIS_PW" }, ""},
		{"password_env bad name", func(s *Settings) { s.PasswordEnv = "A=B" }, "password_env"},
		{"password twice", func(s *Settings) { s.Redis = "redis://:s3cret@h"; s.PasswordEnv = "P" }, "password_env"},
	} {
		s := base
		tc.mod(&s)
		var keys []string
		for _, e := range s.Validate() {
			keys = append(keys, e.Key)
			if strings.Contains(e.Msg, "s3cret") {
				t.Errorf("%s: message shows the password: %s", tc.name, e.Msg)
			}
		}
		if strings.Join(keys, " ") != tc.want {
			t.Errorf("%s: errors on %v, want %q", tc.name, keys, tc.want)
		}
	}
}

func FuzzParseURL(f *testing.F) {
	f.Add("redis://u:pw@h:1/0")
	f.Add("redis-sentinel://h?master_name=m")
	f.Add("#0:pw@")
	f.Add("redis:u:pw@h")
	f.Add("redis://h/u:pw@x")
	f.Add("redis-sentinel://h?master_name=m&sentinel_password=:pw@")
	f.Fuzz(func(t *testing.T, s string) {
		_, err := ParseURL(s)
		if err != nil && strings.Contains(s, ":pw@") && strings.Contains(err.Error(), ":pw@") {
			t.Fatalf("password leaked: %v", err)
		}
		if r := Redact(s); strings.Contains(s, ":pw@") && strings.Contains(r, ":pw@") {
			t.Fatalf("Redact(%q) = %q leaks the password", s, r)
		}
	})
}
