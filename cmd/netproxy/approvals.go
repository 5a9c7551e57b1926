package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"golang.org/x/sys/unix"

	"github.com/netproxy/netproxy/approvalsvc"
	"github.com/netproxy/netproxy/internal/config"
	"github.com/netproxy/netproxy/internal/webui"
)

const (
	defaultAdminURL = "http://127.0.0.1:9091"
	adminTokenEnv   = "NETPROXY_ADMIN_TOKEN"
	approvalsUsage  = `usage:
  netproxy approvals [--admin URL] list [--json]
  netproxy approvals [--admin URL] show ID [--json]
  netproxy approvals [--admin URL] decide ID DECISION
  netproxy approvals [--admin URL] watch

DECISION is one of allow_once, allow_session, allow_always, deny, deny_always.
--admin defaults to http://127.0.0.1:9091; the token comes from $NETPROXY_ADMIN_TOKEN,
else from $NETPROXY_HOME/admin-token (written by serve when it generated the token).
watch streams approvals as they arrive; on a terminal it prompts for each one,
otherwise it reads "ID DECISION" lines from stdin.
`
)

// approvalsCLI carries the command's inputs so tests can drive it.
type approvalsCLI struct {
	stdin          io.Reader
	stdout, stderr io.Writer
	getenv         func(string) string
	tty            bool // stdin is a terminal: watch prompts interactively
	now            func() time.Time
	retryDelay     time.Duration // watch: first reconnect delay
	// tokenFile is read when $NETPROXY_ADMIN_TOKEN is unset ("" : never).
	tokenFile string
	tokenFrom string // where the token came from, for error messages
}

func runApprovals(args []string, stdout, stderr io.Writer) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	_, err := unix.IoctlGetTermios(int(os.Stdin.Fd()), unix.TCGETS)
	cli := &approvalsCLI{
		stdin: os.Stdin, stdout: stdout, stderr: stderr, getenv: os.Getenv,
		tty: err == nil, now: time.Now, retryDelay: time.Second,
		tokenFile: filepath.Join(config.HomeDir(), adminTokenFile),
	}
	return cli.run(ctx, args)
}

func (c *approvalsCLI) usageError(msg string) int {
	if msg != "" {
		fmt.Fprintf(c.stderr, "netproxy approvals: %s\n", msg)
	}
	fmt.Fprint(c.stderr, approvalsUsage)
	return 2
}

func (c *approvalsCLI) run(ctx context.Context, args []string) int {
	admin := defaultAdminURL
	asJSON := false
	var pos []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "-h" || a == "--help" || a == "help":
			fmt.Fprint(c.stdout, approvalsUsage)
			return 0
		case a == "--admin" || a == "-admin":
			if i+1 >= len(args) {
				return c.usageError("--admin needs a URL")
			}
			i++
			admin = args[i]
		case strings.HasPrefix(a, "--admin=") || strings.HasPrefix(a, "-admin="):
			admin = a[strings.IndexByte(a, '=')+1:]
		case a == "--json" || a == "-json":
			asJSON = true
		case a == "--":
			pos = append(pos, args[i+1:]...)
			i = len(args)
		case strings.HasPrefix(a, "-") && len(a) > 1:
			return c.usageError(fmt.Sprintf("unknown flag %s", a))
		default:
			pos = append(pos, a)
		}
	}
	if len(pos) == 0 {
		return c.usageError("missing subcommand")
	}
	sub, rest := pos[0], pos[1:]
	want := map[string]int{"list": 0, "show": 1, "decide": 2, "watch": 0}
	n, ok := want[sub]
	if !ok {
		return c.usageError(fmt.Sprintf("unknown subcommand %q", sub))
	}
	if len(rest) != n {
		return c.usageError(fmt.Sprintf("%s takes %d argument(s), got %d", sub, n, len(rest)))
	}
	var decision string
	if sub == "decide" {
		decision = normalizeDecision(rest[1])
		if !webui.ValidDecision(decision) {
			return c.usageError(fmt.Sprintf("unknown decision %q: want one of %s", rest[1], strings.Join(webui.Decisions, ", ")))
		}
	}
	token, from, err := c.adminToken()
	if err != nil {
		fmt.Fprintf(c.stderr, "netproxy approvals: %v\n", err)
		return 2
	}
	c.tokenFrom = from
	client, err := webui.NewClient(admin, token, nil)
	if err != nil {
		return c.usageError(err.Error())
	}
	switch sub {
	case "list":
		err = c.list(ctx, client, asJSON)
	case "show":
		err = c.show(ctx, client, rest[0], asJSON)
	case "decide":
		err = c.decide(ctx, client, rest[0], decision)
	case "watch":
		err = c.watch(ctx, client)
	}
	if err != nil {
		fmt.Fprintf(c.stderr, "netproxy approvals: %s\n", c.explainAdminError(err, client.Base.String()))
		return 1
	}
	return 0
}

// normalizeDecision accepts "allow-once" as well as "allow_once".
func normalizeDecision(d string) string {
	return strings.ReplaceAll(strings.ToLower(strings.TrimSpace(d)), "-", "_")
}

// explainAdminError turns client errors into what the user should do.
func (c *approvalsCLI) explainAdminError(err error, base string) string {
	var ue *webui.UnreachableError
	switch {
	case errors.Is(err, webui.ErrUnauthorized) && c.tokenFile != "" && c.tokenFrom == c.tokenFile:
		return fmt.Sprintf("admin token from %s rejected by %s: the file is from another run of `netproxy serve`, or that serve uses another NETPROXY_HOME; set %s to the admin token that `netproxy serve` printed at start", c.tokenFrom, base, adminTokenEnv)
	case errors.Is(err, webui.ErrUnauthorized):
		return fmt.Sprintf("admin token rejected by %s: set %s to the admin token that `netproxy serve` printed at start (the value of the variable named by admin.token_env)", base, adminTokenEnv)
	case errors.As(err, &ue):
		return fmt.Sprintf("%v\n  is `netproxy serve` running? Point --admin at its admin listener (default %s).", err, defaultAdminURL)
	case errors.Is(err, context.Canceled):
		return "interrupted"
	}
	return err.Error()
}

func (c *approvalsCLI) ago(t time.Time) string {
	if t.IsZero() {
		return "?"
	}
	d := c.now().Sub(t).Round(time.Second)
	if d < 0 {
		d = 0
	}
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm%02ds", int(d.Minutes()), int(d.Seconds())%60)
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh%02dm", int(d.Hours()), int(d.Minutes())%60)
	}
	return fmt.Sprintf("%dd", int(d.Hours()/24))
}

func dashIfEmpty(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func (c *approvalsCLI) list(ctx context.Context, client *webui.Client, asJSON bool) error {
	list, err := client.Approvals(ctx, "pending")
	if err != nil {
		return err
	}
	// Newest first, as on the page.
	sortApprovalsNewestFirst(list)
	if asJSON {
		if list == nil {
			list = []approvalsvc.Approval{}
		}
		return writeIndentedJSON(c.stdout, map[string]any{"approvals": list})
	}
	if len(list) == 0 {
		fmt.Fprintln(c.stdout, "no pending approvals")
		return nil
	}
	tw := tabwriter.NewWriter(c.stdout, 0, 0, 2, ' ', 0)
	// WAITING: requests waiting on the review; 0 when they all left (it
	// stays decidable; a retry gets the decision — SPEC §5).
	fmt.Fprintln(tw, "ID\tAGE\tKIND\tTARGET\tPROTOCOL\tWAITING\tSESSION\tENV\tCOMMAND\tREASON")
	for _, a := range list {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\t%s\n", a.ID, c.ago(webui.Created(a)), dashIfEmpty(a.Kind), webui.Target(a), dashIfEmpty(a.Protocol), a.Waiting,
			dashIfEmpty(a.SessionID), dashIfEmpty(a.EnvironmentID), clipText(dashIfEmpty(webui.CommandText(a)), 60),
			clipText(dashIfEmpty(a.Reason), 60))
	}
	return tw.Flush()
}

func sortApprovalsNewestFirst(list []approvalsvc.Approval) {
	for i := 1; i < len(list); i++ {
		for j := i; j > 0 && webui.Created(list[j]).After(webui.Created(list[j-1])); j-- {
			list[j], list[j-1] = list[j-1], list[j]
		}
	}
}

func clipText(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}

func writeIndentedJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func (c *approvalsCLI) show(ctx context.Context, client *webui.Client, id string, asJSON bool) error {
	a, err := client.Approval(ctx, id)
	if err != nil {
		return err
	}
	if asJSON {
		return writeIndentedJSON(c.stdout, a)
	}
	c.printApproval(a, "")
	return nil
}

// printApproval writes the full context of one approval.
func (c *approvalsCLI) printApproval(a approvalsvc.Approval, indent string) {
	rows := [][2]string{
		{"id", a.ID},
		{"status", a.Status},
		{"kind", a.Kind},
		{"target", webui.Target(a)},
		{"protocol", a.Protocol},
		{"reason", a.Reason},
		{"justification", a.Justification},
		{"amendment", webui.ProposedRule(a)},
		{"sandbox", a.SandboxPermissions},
		{"rationale", a.Rationale},
		{"command", webui.CommandText(a)},
		{"cwd", a.Cwd},
		{"session", a.SessionID},
		{"environment", a.EnvironmentID},
		{"execution", a.ExecutionID},
		{"created", a.CreatedAt},
		{"age", c.ago(webui.Created(a))},
	}
	if a.Status == approvalsvc.StatusPending {
		rows = append(rows, [2]string{"waiting", strconv.Itoa(a.Waiting)})
	}
	if a.Decision != "" {
		rows = append(rows, [2]string{"decision", a.Decision}, [2]string{"reviewer", a.Reviewer}, [2]string{"decided", a.DecidedAt})
	}
	tw := tabwriter.NewWriter(c.stdout, 0, 0, 2, ' ', 0)
	for _, r := range rows {
		if r[1] == "" {
			continue
		}
		fmt.Fprintf(tw, "%s%s:\t%s\n", indent, r[0], r[1])
	}
	_ = tw.Flush()
}

func (c *approvalsCLI) decide(ctx context.Context, client *webui.Client, id, decision string) error {
	if err := client.Decide(ctx, id, decision); err != nil {
		var se *webui.StatusError
		if errors.As(err, &se) && (se.Status == 404 || se.Status == 409) {
			return fmt.Errorf("approval %s is not pending (already decided or timed out): %w", id, err)
		}
		return err
	}
	fmt.Fprintf(c.stdout, "approval %s: %s\n", id, decision)
	return nil
}

// promptKeys maps the watch prompt's answers to decisions.
var promptKeys = map[string]string{
	"o": "allow_once", "s": "allow_session", "a": "allow_always", "d": "deny", "D": "deny_always",
}

const watchPrompt = "[o]nce/[s]ession/[a]lways/[d]eny/[D]eny always/[Enter] skip"

// streamItem is one event or the end of a stream.
type streamItem struct {
	ev  webui.Event
	err error // set when the stream ended
}

// watch streams events and lets the reviewer decide. It returns nil on
// interrupt or (on a terminal) end of input, an error only when the server
// rejects the token or a first connection fails.
func (c *approvalsCLI) watch(ctx context.Context, client *webui.Client) error {
	lines := make(chan string)
	inputDone := make(chan struct{})
	go func() {
		defer close(inputDone)
		sc := bufio.NewScanner(c.stdin)
		for sc.Scan() {
			select {
			case lines <- sc.Text():
			case <-ctx.Done():
				return
			}
		}
	}()

	w := &watcher{cli: c, client: client, seen: map[string]bool{}, pending: map[string]approvalsvc.Approval{}}
	delay := c.retryDelay
	first := true
	for {
		items, closer, err := w.connect(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			if first || errors.Is(err, webui.ErrUnauthorized) {
				return err
			}
			fmt.Fprintf(c.stderr, "event stream: %s; retrying in %s\n", c.explainAdminError(err, client.Base.String()), delay)
			if !sleepCtx(ctx, delay) {
				return nil
			}
			delay = min(delay*2, 10*time.Second)
			continue
		}
		if first {
			fmt.Fprintf(c.stdout, "watching %s for approvals (Ctrl-C to stop)\n", client.Base)
			if !c.tty {
				fmt.Fprintln(c.stdout, `decide by typing "ID DECISION" lines on stdin`)
			}
		}
		first = false
		delay = c.retryDelay
		w.promptNext()
		end, err := w.loop(ctx, items, lines, inputDone)
		closer.Close()
		if end || ctx.Err() != nil {
			return nil
		}
		fmt.Fprintf(c.stderr, "event stream ended (%v); reconnecting\n", err)
		if !sleepCtx(ctx, delay) {
			return nil
		}
	}
}

func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// watcher is the state of one watch session.
type watcher struct {
	cli       *approvalsCLI
	client    *webui.Client
	seen      map[string]bool                 // ids already printed
	pending   map[string]approvalsvc.Approval // still waiting on the server
	queue     []string                        // ids to prompt for (tty), oldest first
	prompting string                          // id of the prompt on screen
}

// connect opens the stream first, then lists what is already pending, so
// no approval falls between the two.
func (w *watcher) connect(ctx context.Context) (<-chan streamItem, io.Closer, error) {
	sctx, cancel := context.WithCancel(ctx)
	rd, body, err := w.client.Events(sctx)
	if err != nil {
		cancel()
		return nil, nil, err
	}
	list, err := w.client.Approvals(ctx, "pending")
	if err != nil {
		cancel()
		body.Close()
		return nil, nil, err
	}
	// Forget approvals that were decided while we were away.
	current := map[string]bool{}
	for _, a := range list {
		current[a.ID] = true
	}
	for id := range w.pending {
		if !current[id] {
			w.drop(id)
		}
	}
	for i := len(list) - 1; i >= 0; i-- { // oldest first on screen
		w.created(list[i])
	}
	items := make(chan streamItem, 16)
	go func() {
		defer close(items)
		for {
			ev, err := rd.Next()
			if err != nil {
				select {
				case items <- streamItem{err: err}:
				case <-sctx.Done():
				}
				return
			}
			select {
			case items <- streamItem{ev: ev}:
			case <-sctx.Done():
				return
			}
		}
	}()
	return items, closerFunc(func() error { cancel(); return body.Close() }), nil
}

type closerFunc func() error

func (f closerFunc) Close() error { return f() }

// loop handles events and input until the stream ends (end=false) or the
// user is done (end=true).
func (w *watcher) loop(ctx context.Context, items <-chan streamItem, lines <-chan string, inputDone <-chan struct{}) (end bool, err error) {
	for {
		select {
		case <-ctx.Done():
			return true, nil
		case it, ok := <-items:
			if !ok {
				return false, io.EOF
			}
			if it.err != nil {
				return false, it.err
			}
			w.handleEvent(it.ev)
		case line := <-lines:
			w.handleLine(ctx, line)
		case <-inputDone:
			inputDone = nil // a closed stdin stops prompting, not watching
			if w.cli.tty {
				return true, nil
			}
		}
	}
}

func (w *watcher) stamp() string { return w.cli.now().Format("15:04:05") }

func (w *watcher) handleEvent(ev webui.Event) {
	out := w.cli.stdout
	switch ev.Name {
	case webui.EventApprovalCreated:
		var a approvalsvc.Approval
		if json.Unmarshal(ev.Data, &a) != nil || a.ID == "" {
			return
		}
		w.created(a)
		w.promptNext()
	case webui.EventApprovalDecided:
		var a approvalsvc.Approval
		if json.Unmarshal(ev.Data, &a) != nil || a.ID == "" {
			return
		}
		if _, waiting := w.pending[a.ID]; !waiting && w.seen[a.ID] {
			return // we decided it ourselves and already said so
		}
		by := ""
		if a.Reviewer != "" {
			by = " by " + a.Reviewer
		}
		target := webui.Target(a)
		if p, ok := w.pending[a.ID]; ok && a.Host == "" {
			target = webui.Target(p)
		}
		fmt.Fprintf(out, "\n[%s] decided %s %s: %s%s\n", w.stamp(), a.ID, target, dashIfEmpty(a.Decision), by)
		w.drop(a.ID)
		w.promptNext()
	case webui.EventBlocked:
		var b struct {
			Host, Protocol, Reason, Source, Method string
			Port                                   uint16
		}
		if json.Unmarshal(ev.Data, &b) != nil {
			return
		}
		a := approvalsvc.Approval{Host: b.Host, Port: b.Port}
		fmt.Fprintf(out, "[%s] blocked %s %s %s reason=%s source=%s\n", w.stamp(), webui.Target(a), dashIfEmpty(b.Protocol), dashIfEmpty(b.Method), b.Reason, b.Source)
	case webui.EventExecutionStarted, webui.EventExecutionEnded:
		var e webui.Execution
		if json.Unmarshal(ev.Data, &e) != nil {
			return
		}
		verb := "started"
		if ev.Name == webui.EventExecutionEnded {
			verb = "ended"
		}
		fmt.Fprintf(out, "[%s] execution %s %s: %s\n", w.stamp(), verb, e.ID, webui.ShellJoin(e.Command))
	}
}

// created prints a new approval once and queues it for a decision.
func (w *watcher) created(a approvalsvc.Approval) {
	if w.seen[a.ID] {
		return
	}
	w.seen[a.ID] = true
	w.pending[a.ID] = a
	w.queue = append(w.queue, a.ID)
	fmt.Fprintf(w.cli.stdout, "\n[%s] approval %s: %s %s (%s)\n", w.stamp(), a.ID, dashIfEmpty(a.Kind), webui.Target(a), dashIfEmpty(a.Protocol))
	w.cli.printApproval(a, "    ")
}

func (w *watcher) drop(id string) {
	delete(w.pending, id)
	for i, q := range w.queue {
		if q == id {
			w.queue = append(w.queue[:i], w.queue[i+1:]...)
			break
		}
	}
	if w.prompting == id {
		w.prompting = ""
	}
}

// promptNext shows the prompt for the oldest undecided approval (tty only).
func (w *watcher) promptNext() {
	if !w.cli.tty || w.prompting != "" || len(w.queue) == 0 {
		return
	}
	id := w.queue[0]
	w.prompting = id
	a := w.pending[id]
	fmt.Fprintf(w.cli.stdout, "decide %s %s? %s: ", id, webui.Target(a), watchPrompt)
}

func (w *watcher) handleLine(ctx context.Context, line string) {
	line = strings.TrimSpace(line)
	if w.cli.tty && w.prompting != "" {
		id := w.prompting
		if line == "" {
			fmt.Fprintf(w.cli.stdout, "skipped %s (still pending)\n", id)
			w.prompting = ""
			w.queue = w.queue[1:]
			w.promptNext()
			return
		}
		decision, ok := promptKeys[line]
		if !ok {
			decision = normalizeDecision(line)
		}
		if !webui.ValidDecision(decision) {
			fmt.Fprintf(w.cli.stdout, "unknown answer %q; %s: ", line, watchPrompt)
			return
		}
		w.send(ctx, id, decision)
		w.promptNext()
		return
	}
	if line == "" || strings.HasPrefix(line, "#") {
		return
	}
	fields := strings.Fields(line)
	if len(fields) != 2 {
		fmt.Fprintf(w.cli.stderr, "ignored input %q: want \"ID DECISION\"\n", clipText(line, 80))
		return
	}
	decision := normalizeDecision(fields[1])
	if d, ok := promptKeys[fields[1]]; ok {
		decision = d
	}
	if !webui.ValidDecision(decision) {
		fmt.Fprintf(w.cli.stderr, "ignored input: unknown decision %q (want one of %s)\n", fields[1], strings.Join(webui.Decisions, ", "))
		return
	}
	w.send(ctx, fields[0], decision)
	w.promptNext()
}

func (w *watcher) send(ctx context.Context, id, decision string) {
	dctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	if err := w.client.Decide(dctx, id, decision); err != nil {
		var se *webui.StatusError
		if errors.As(err, &se) && (se.Status == 404 || se.Status == 409) {
			fmt.Fprintf(w.cli.stderr, "approval %s is not pending any more (decided elsewhere or timed out)\n", id)
			w.drop(id)
			return
		}
		fmt.Fprintf(w.cli.stderr, "deciding %s: %s\n", id, w.cli.explainAdminError(err, w.client.Base.String()))
		if w.prompting == id {
			w.prompting = "" // prompt again
		}
		return
	}
	fmt.Fprintf(w.cli.stdout, "[%s] %s %s: %s\n", w.stamp(), "you decided", id, decision)
	w.seen[id] = true
	w.drop(id)
}
