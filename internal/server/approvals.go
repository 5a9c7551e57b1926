package server

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/netproxy/netproxy/approvalsvc"
	"github.com/netproxy/netproxy/guardian"
	"github.com/netproxy/netproxy/internal/config"
)

// setupApprovals builds the approval service on the server's registry and
// engine and plugs it in: decider, control-socket exec approvals, admin API
// and the blocked-request ring. With approvals disabled only the blocked
// list and the (empty) approvals list are served, and POST /v1/approvals
// denies.
//
// auditor is the audit writer (nil when audit.path is empty); it is handed
// in explicitly rather than found among the server's sinks.
//
// coord is the cluster (nil on a single node).
func (s *Server) setupApprovals(auditor approvalsvc.Auditor, coord approvalsvc.Coordinator) (*approvalsvc.Service, error) {
	cfg := s.Config()
	var rev guardian.Reviewer
	if cfg.Approvals.Enabled && cfg.Approvals.Reviewer == approvalsvc.ReviewerGuardian {
		var err error
		baseDir := ""
		if cfg.Path != "" {
			baseDir = filepath.Dir(cfg.Path)
		}
		deps := guardian.Deps{Prescreen: s.Metrics(), Logger: s.Logger().With("component", "guardian")}
		if rev, err = guardian.New(config.GuardianSettings(cfg.Guardian), baseDir, os.Getenv, deps); err != nil {
			return nil, err
		}
	}
	engine := s.Engine()
	svc, err := approvalsvc.New(approvalsvc.Options{
		Settings: cfg.Approvals.Settings(),
		Guardian: rev,
		// The admin API always has a token (generated when none is set), so
		// a human can always be reached through it.
		UserReviewer: true,
		Owners:       s.Registry(),
		Publisher:    s.Registry(),
		Amender:      engine,
		Rules:        approvalsvc.RulesFile{Path: filepath.Join(config.HomeDir(), "rules", "default.rules")},
		Metrics:      s.Metrics(),
		Audit:        auditor,
		Coordinator:  coord,
		Logger:       s.Logger().With("component", "approvals"),
		SecretEnv:    []string{cfg.Admin.TokenEnv, cfg.Guardian.APIKeyEnv},
	})
	if err != nil {
		return nil, fmt.Errorf("approvals: %w", err)
	}
	s.SetDecider(svc)
	s.SetControlApprovals(svc.ControlHandler())
	s.AddSink(svc)
	api := svc.APIHandler()
	for _, p := range approvalsvc.APIPatterns {
		s.Admin().HandleAPI(p, api)
	}
	return svc, nil
}
