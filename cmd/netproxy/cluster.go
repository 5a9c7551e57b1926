package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/netproxy/netproxy/cluster"
	"github.com/netproxy/netproxy/internal/config"
)

// runCluster is `netproxy cluster status [--config FILE] [--json]`: the
// nodes, their last heartbeat and change-stream lag, and the pending
// reviews, read from the Redis named by [cluster].
func runCluster(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] != "status" {
		fmt.Fprintln(stderr, "usage: netproxy cluster status [--config FILE] [--json]")
		return 2
	}
	fs := flag.NewFlagSet("netproxy cluster status", flag.ContinueOnError)
	fs.SetOutput(stderr)
	cfgPath := fs.String("config", "", "configuration file (its [cluster] table names Redis)")
	asJSON := fs.Bool("json", false, "print JSON")
	if err := fs.Parse(args[1:]); err != nil {
		return 2
	}
	cfg := config.Default()
	if *cfgPath != "" {
		var err error
		if cfg, err = config.Load(*cfgPath); err != nil {
			fmt.Fprintf(stderr, "netproxy cluster status: %v\n", err)
			return 2
		}
	}
	cs := cfg.Cluster.Settings()
	if !cs.Enabled() {
		fmt.Fprintln(stderr, "netproxy cluster status: cluster.redis is empty: cluster mode is off (give --config FILE with a [cluster] table)")
		return 2
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := cluster.ReadStatus(ctx, cs)
	if err != nil {
		fmt.Fprintf(stderr, "netproxy cluster status: %v\n", err)
		return 1
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		enc.Encode(st)
		return 0
	}
	st.Print(stdout)
	return 0
}
