package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/skein-mesh/skein/gateway"
	"github.com/skein-mesh/skein/pkg/bus"
	"github.com/skein-mesh/skein/pkg/config"
	"github.com/skein-mesh/skein/pkg/delta"
	"github.com/skein-mesh/skein/pkg/govern"
	"github.com/skein-mesh/skein/pkg/memory/ingest"
	"github.com/skein-mesh/skein/pkg/protocol"
	"github.com/skein-mesh/skein/pkg/redact"
	"github.com/skein-mesh/skein/pkg/service"
	"github.com/skein-mesh/skein/pkg/trace"
)

// runResult is the one JSON object `skein run --json` prints.
type runResult struct {
	SessionID string   `json:"session_id"`
	Outcome   string   `json:"outcome"`
	FinalText string   `json:"final_text"`
	Reason    string   `json:"reason,omitempty"`
	Usage     runUsage `json:"usage"`
}

type runUsage struct {
	InputTokens              int64 `json:"input_tokens"`
	OutputTokens             int64 `json:"output_tokens"`
	CacheCreationInputTokens int64 `json:"cache_creation_input_tokens"`
	CacheReadInputTokens     int64 `json:"cache_read_input_tokens"`
	Turns                    int   `json:"turns"`
	// Steps is Turns under its old name, printed until the next version (docs/json.md).
	Steps     int      `json:"steps"`
	WallTimeS float64  `json:"wall_time_s"`
	CostUSD   *float64 `json:"cost_usd"`
}

// runOpts are `skein run`'s flags.
type runOpts struct {
	sessionID, agent string
	asJSON, verbose  bool
	timeout          time.Duration
	budgetKVs        []string
}

func newRunCmd() *cobra.Command {
	var o runOpts
	cmd := &cobra.Command{
		Use:   "run [flags] TASK",
		Short: "Submit a task, stream its progress and print the result",
		Long: "run submits TASK to the mesh at --nats / $SKEIN_NATS_URL; with neither it starts an embedded mesh\n" +
			"for this run, keeping state in $SKEIN_HOME (default ./.skein) so later runs see it.\n" +
			"Offline, llm.provider: scripted answers from a rule file instead of a model: `skein help script`.\n\n" +
			"Exit status: 0 for the outcomes success and success_with_recovery, 1 for any other outcome, and\n" +
			"for a failure before the task ran the class of the failure: 64 usage, 65 task refused, 69 no mesh,\n" +
			"75 try again later, 77 credentials refused, 78 config (docs/json.md, \"Exit status\").",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error { return o.run(cmd, args[0]) },
	}
	cmd.Flags().StringVar(&o.sessionID, "session-id", "", "use this session id (resubmitting the same id does not run the task twice)")
	cmd.Flags().StringVar(&o.agent, "agent", "", "agent to run the task (default: agent.name from the config)")
	cmd.Flags().BoolVar(&o.asJSON, "json", false, "print exactly one JSON object: session_id, outcome, final_text, usage")
	cmd.Flags().BoolVarP(&o.verbose, "verbose", "v", false, "show each guideline retrieved (score and why) and every decision of the miner (with --json, on stderr)")
	cmd.Flags().DurationVar(&o.timeout, "timeout", 30*time.Minute, "give up following the session after this long")
	cmd.Flags().StringArrayVar(&o.budgetKVs, "budget", nil, "limit this task: KEY=VALUE, repeatable; keys max_input_tokens, max_output_tokens, max_usd,\n"+
		"deadline_s, max_turns, max_tool_calls, max_depth, max_fanout (agent.budget applies too; the tighter wins)")
	return cmd
}

// run submits task, follows the session to its end (and, on an embedded mesh, to its mining)
// and prints the result.
func (o *runOpts) run(cmd *cobra.Command, task string) error {
	cfg, budget, err := o.prepare(cmd)
	if err != nil {
		return err
	}
	ctx, stop := context.WithCancel(cmd.Context())
	defer stop()
	cmd.SetContext(ctx)
	submitted, release := interruptible(cmd, stop)
	defer release()
	conn, names, mesh, closeMesh, err := dialMeshFull(cmd, cfg)
	if err != nil {
		return err
	}
	defer closeMesh()
	if o.agent == "" {
		o.agent = cfg.Agent.Name
	}
	// The session id is minted here, before the first try, so a retry after a slow first
	// try finds the same session instead of making a second one.
	if o.sessionID == "" {
		o.sessionID = gateway.NewSessionID()
	}
	text, unfollow := o.streamText(cmd, conn, names)
	defer unfollow()
	session, err := submitTask(ctx, conn, names, &protocol.SubmitRequest{SessionID: o.sessionID, Agent: o.agent, Task: task, Caller: "cli", Budget: budget,
		TurnID: protocol.DerivedTurnID(o.sessionID, task)})
	if err != nil {
		return err
	}
	onInterrupt := cancelOnInterrupt(cmd, conn, names, session, stop)
	submitted.Store(&onInterrupt)
	// An embedded run also waits for its own miner, so the lesson of this run is in memory
	// before the next one starts; against a remote mesh the miner works on its own time.
	// With memory off, or memoryd not started (its models missing), nothing is mined into
	// memory, so the run ends at its answer. It is asked once the session has ended.
	waitMiner := func() bool {
		return mesh != nil && cfg.Miner.Enabled && mesh.memoryOn && waitingForMiner() && memorydUp(ctx, conn, names)
	}
	f := o.follow(cmd, conn, names, session, text, waitMiner)
	if f.err != nil {
		return f.err
	}
	if mesh != nil {
		// Let the trace mirror write the last lines before the embedded mesh stops.
		waitMirrored(ctx, mesh, names, session, 5*time.Second)
	}
	memoryServed := cfg.Miner.Enabled && cfg.Memory.Enabled && (mesh == nil || mesh.memoryOn)
	return o.print(cmd, f, text != nil && text.showed(f.res.FinalText), memoryServed)
}

// prepare checks the flags and loads the configuration; when the mesh will start in this
// process, it checks that every agent's model keys are present first.
func (o *runOpts) prepare(cmd *cobra.Command) (*config.Config, *protocol.Budget, error) {
	if err := checkID(protocol.IDSession, o.sessionID); err != nil {
		return nil, nil, err
	}
	if err := checkID(protocol.IDAgent, o.agent); err != nil {
		return nil, nil, err
	}
	var budget *protocol.Budget
	if len(o.budgetKVs) > 0 {
		b, err := govern.ParseBudget(o.budgetKVs)
		if err != nil {
			return nil, nil, usageError(cmd, fmt.Errorf("--budget: %w", err))
		}
		budget = &b
	}
	cfg, err := loadConfig(cmd)
	if err != nil {
		return nil, nil, configError(err)
	}
	flagURL, _ := cmd.Flags().GetString("nats")
	if service.NATSURL(flagURL, cfg) == "" {
		others, err := agentConfigs(cmd, cfg)
		if err != nil {
			return nil, nil, configError(err)
		}
		for _, c := range append([]*config.Config{cfg}, others...) {
			if err := checkKeys(c, nil); err != nil {
				return nil, nil, err
			}
		}
	}
	return cfg, budget, nil
}

// interruptible handles Ctrl-C: before the task is submitted it stops the command (stop);
// after, it calls the function stored in the returned pointer (which cancels the session and
// lets the run wait for it to end as cancelled). A second Ctrl-C leaves at once. release
// gives the signals back.
func interruptible(cmd *cobra.Command, stop func()) (submitted *atomic.Pointer[func()], release func()) {
	submitted = new(atomic.Pointer[func()])
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	go func() {
		first := true
		for range sigs {
			if !first {
				fmt.Fprintln(cmd.ErrOrStderr(), "skein: leaving without waiting")
				os.Exit(130)
			}
			first = false
			if f := submitted.Load(); f != nil {
				go (*f)()
			} else {
				stop()
			}
		}
	}()
	return submitted, func() { signal.Stop(sigs) }
}

// streamText shows the model's text as it is generated when stdout is a terminal (and not
// --json): it follows the session's deltas before the session exists, so none is missed. It
// returns nil when the answer shows only once complete, and the function that stops following.
func (o *runOpts) streamText(cmd *cobra.Command, conn *bus.Conn, names protocol.Names) (*textStream, func()) {
	w, h, ok := terminalOut(cmd.OutOrStdout())
	if !ok || o.asJSON {
		return nil, func() {}
	}
	text := newTextStream(cmd.OutOrStdout(), w, h, "")
	sub, err := delta.Follow(conn.NC, names, o.sessionID, text.add)
	if err != nil {
		fmt.Fprintf(cmd.ErrOrStderr(), "skein: the answer shows when it is complete (%v)\n", err)
		return nil, func() {}
	}
	return text, func() { _ = sub.Unsubscribe() }
}

// cancelOnInterrupt is what Ctrl-C does once the task is submitted: it cancels the session
// (the run then waits for it to end as cancelled), or stops the command when it cannot.
func cancelOnInterrupt(cmd *cobra.Command, conn *bus.Conn, names protocol.Names, session string, stop func()) func() {
	ctx := cmd.Context()
	return func() {
		fmt.Fprintf(cmd.ErrOrStderr(), "\nskein: cancelling session %s (Ctrl-C again to leave at once)\n", session)
		cctx, ccancel := context.WithTimeout(context.WithoutCancel(ctx), 15*time.Second)
		defer ccancel()
		if _, err := cancelSession(cctx, conn, names, session, cliUser()+" (Ctrl-C)", "interrupted"); err != nil {
			fmt.Fprintln(cmd.ErrOrStderr(), "skein: cancel:", err)
			stop()
		}
	}
}

// submitTask asks the mesh to run req and returns the session id it answers with; an error
// exits with the status of its class (wireExit), saying whether trying again can help.
func submitTask(ctx context.Context, conn *bus.Conn, names protocol.Names, req *protocol.SubmitRequest) (string, error) {
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	var rep protocol.SubmitReply
	if err := bus.Request(sctx, conn.NC, names.Submit(), req, &rep, submitTry); err != nil {
		return "", wireExit(err, fmt.Sprintf("skein: submit: %v (the mesh did not answer; nothing was refused, try again)", err))
	}
	if err := rep.Err(); err != nil {
		if protocol.CodeOf(err).Retryable() { // transient, storage_full
			return "", wireExit(err, "skein: "+err.Error()+" (try again)")
		}
		return "", wireExit(err, "skein: "+err.Error())
	}
	return rep.SessionID, nil
}

// followed is what following a run's session gave: its result, the miner's event (nil when
// it did not come) and, when the session did not finish, why (an exitError).
type followed struct {
	res   runResult
	mined *protocol.Event
	err   error
}

// follow shows the session's progress (and text, when it streams) until its usage report ends
// it or --timeout passes; with waitMiner (asked when the session has ended) it then waits up to
// a minute more for the miner's report.
func (o *runOpts) follow(cmd *cobra.Command, conn *bus.Conn, names protocol.Names, session string, text *textStream, waitMiner func() bool) followed {
	ctx := cmd.Context()
	view := newProgress(cmd.ErrOrStderr(), o.asJSON)
	view.verbose = o.verbose
	if text != nil {
		view.text, text.before = text, view.clear
	}
	f := followed{res: runResult{SessionID: session}}
	fctx, fcancel := context.WithTimeout(ctx, o.timeout)
	defer fcancel()
	var ended bool
	followCtx, stopFollow := context.WithCancel(fctx)
	defer stopFollow()
	err := trace.Follow(followCtx, conn.JS, names, session, func(ev protocol.Event) bool {
		if ev.Role != protocol.RoleMiner || ev.Type == protocol.EvUsage {
			view.event(ev)
		}
		switch {
		case ev.Type.Terminal():
			f.res.Outcome, f.res.FinalText, f.res.Reason = string(ev.Outcome), ev.Text, ev.Reason
		case ev.Type == protocol.EvMined:
			f.mined = &ev
		case ev.Type == protocol.EvUsage:
			if r := ev.Report; r != nil {
				f.res.Usage = runUsage{r.InputTokens, r.OutputTokens, r.CacheCreationInputTokens, r.CacheReadInputTokens, r.TurnCount(), r.TurnCount(), r.WallTimeS, r.CostUSD}
			}
			if f.res.Outcome == "" {
				f.res.Outcome = string(ev.Outcome)
			}
			ended = true
			if ev.Role != protocol.RoleMiner && waitMiner() {
				time.AfterFunc(60*time.Second, stopFollow)
				return true
			}
			return false
		}
		return true
	})
	view.done()
	if text != nil {
		text.end()
	}
	if ended && followCtx.Err() != nil && fctx.Err() == nil {
		err = nil // stopped waiting for the miner, not for the session
	}
	if !ended {
		if err == nil {
			err = fctx.Err()
		}
		f.err = fail(protocol.ExitTempFail, "session %s did not finish: %v (follow it with `skein trace tail %s`)", session, err, session)
	}
	return f
}

// print writes the result (one JSON object with --json; without the answer when streamed
// showed it whole) and what the miner decided; the exit status is 0 only for a successful
// outcome.
func (o *runOpts) print(cmd *cobra.Command, f followed, streamed, memoryServed bool) error {
	out := cmd.OutOrStdout()
	if o.asJSON {
		if err := json.NewEncoder(out).Encode(f.res); err != nil {
			return err
		}
	} else {
		flagURL, _ := cmd.Flags().GetString("nats")
		printResult(out, f.res, service.Home(), flagURL, streamed)
	}
	switch {
	case f.mined != nil && o.verbose && o.asJSON:
		printDecisions(cmd.ErrOrStderr(), f.mined) // stdout holds exactly the JSON object
	case f.mined != nil && o.verbose:
		printDecisions(out, f.mined)
	case f.mined != nil && !o.asJSON:
		printLearned(out, f.mined)
	case f.mined == nil && o.verbose && memoryServed:
		// Against a remote mesh the miner works on its own time (see waitMiner).
		fmt.Fprintf(cmd.ErrOrStderr(), "  miner: its decisions come once it has mined the session: skein trace show %s\n", f.res.SessionID)
	}
	if !protocol.Outcome(f.res.Outcome).Succeeded() {
		return &exitError{code: protocol.ExitOutcome}
	}
	return nil
}

// printResult prints the answer (unless streamed shows it was already shown whole, as it was
// generated) and the summary.
func printResult(w io.Writer, r runResult, home, natsFlag string, streamed bool) {
	if r.FinalText != "" {
		if !streamed {
			fmt.Fprintln(w, r.FinalText)
		}
		fmt.Fprintln(w)
	}
	line := fmt.Sprintf("outcome: %s · session %s · %d turn(s) · %.1fs · in %d / out %d tokens (cache write %d, read %d) · cost %s",
		r.Outcome, r.SessionID, r.Usage.Turns, r.Usage.WallTimeS, r.Usage.InputTokens, r.Usage.OutputTokens,
		r.Usage.CacheCreationInputTokens, r.Usage.CacheReadInputTokens, trace.Cost(r.Usage.CostUSD))
	fmt.Fprintln(w, line)
	if r.Reason != "" {
		fmt.Fprintln(w, "reason:", r.Reason)
	}
	fmt.Fprintln(w, traceHint(home, r.SessionID, natsFlag))
}

// traceHint says how to read a session's trace again: the command (with the --nats this run
// was given, since the next shell may not have it), and the trace files when they are on this
// machine. Against a remote mesh they are written where its gateway runs, not under this home.
func traceHint(home, session, natsFlag string) string {
	show := "skein trace show " + session
	if natsFlag != "" {
		show = "skein trace show --nats " + shellWord(redact.URL(natsFlag)) + " " + session
	}
	jsonl := trace.JSONLPath(home, session)
	if _, err := os.Stat(jsonl); err != nil {
		return "trace: " + show
	}
	return fmt.Sprintf("trace: %s  (files: %s, %s)", show, jsonl, trace.LogPath(home, session))
}

// progress shows a run as it happens: one live status line on a terminal, plain event lines
// otherwise, nothing with --json.
type progress struct {
	w       io.Writer
	text    *textStream // the model's text on the same terminal: no status line while it writes
	quiet   bool
	verbose bool // guidelines with their scores and why, even with --json (on stderr)
	live    bool
	start   time.Time
	status  string
	tools   int
	turn    int
}

func newProgress(w io.Writer, quiet bool) *progress {
	live := false
	if f, ok := w.(*os.File); ok && term.IsTerminal(int(f.Fd())) && os.Getenv("TERM") != "dumb" {
		live = true
	}
	return &progress{w: w, quiet: quiet, live: live, start: time.Now()}
}

func (p *progress) event(ev protocol.Event) {
	if p.verbose && ev.Type == protocol.EvRetrieval {
		p.clear()
		printRetrieved(p.w, ev)
	}
	if p.quiet {
		return
	}
	if !p.live {
		fmt.Fprintln(p.w, trace.Line(ev))
		return
	}
	switch ev.Type {
	case protocol.EvModelCall:
		p.turn = ev.Turn
		p.status = fmt.Sprintf("model %s answered in %dms", ev.Model, ev.LatencyMS)
	case protocol.EvToolCall:
		p.tools++
		if ev.Result != nil && !ev.Result.OK {
			p.clear()
			fmt.Fprintf(p.w, "  ✗ %s failed (%s): %s\n", ev.Tool, ev.Result.Kind, firstLine(ev.Result.Error))
		}
		p.status = "tool " + ev.Tool
	case protocol.EvRetrieval:
		if len(ev.Guidelines) > 0 && !p.verbose {
			p.clear()
			fmt.Fprintf(p.w, "  ↳ using %d guideline(s) from past runs\n", len(ev.Guidelines))
		}
	case protocol.EvCompaction:
		p.status = fmt.Sprintf("compacted context (saved %d tokens)", ev.TokensSaved)
	default:
		p.status = string(ev.Type)
	}
	draw := func() {
		p.clear()
		fmt.Fprintf(p.w, "⋯ %5.1fs · turn %d · %d tool call(s) · %s", time.Since(p.start).Seconds(), p.turn, p.tools, p.status)
	}
	if p.text != nil {
		p.text.idle(draw)
	} else {
		draw()
	}
}

func (p *progress) clear() {
	if p.live {
		fmt.Fprint(p.w, "\r\033[K")
	}
}

func (p *progress) done() {
	if !p.quiet && p.live {
		p.clear()
	}
}

// memorydUp reports whether memoryd answers, so a run only waits for mining that can happen.
// It asks once: by the time a session has ended memoryd has had its chance to start, and
// retrying "no responders" here only made every run without memoryd wait a dead 3 s.
// submitTry is how long `skein run` waits for the gateway's answer before it submits again (with
// the same session id, so a slow first try makes no second session).
var submitTry = 5 * time.Second

// waitingForMiner is called when an embedded run, past its answer, goes on to ask for memoryd
// and wait for its miner; it returns true. Tests replace it to see the path is not taken.
var waitingForMiner = func() bool { return true }

func memorydUp(ctx context.Context, conn *bus.Conn, names protocol.Names) bool {
	data, err := protocol.Marshal(&protocol.MemoryHealthRequest{})
	if err != nil {
		return false
	}
	hctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	msg, err := conn.NC.RequestWithContext(hctx, names.Memory(protocol.MemHealth), data)
	if err != nil {
		return false
	}
	var rep protocol.MemoryHealthReply
	return protocol.Unmarshal(msg.Data, &rep) == nil && rep.OK
}

// printLearned tells the user what this run taught the mesh.
func printLearned(w io.Writer, ev *protocol.Event) {
	text := map[string]string{}
	for _, c := range ev.Mined {
		text[c.Key] = c.Text
	}
	for _, a := range ev.Ingested {
		if a.Action == ingest.ActSkipped {
			continue
		}
		fmt.Fprintf(w, "  learned: %s %s: %s\n", a.Action, shortID(a.EntryID), text[a.Key])
	}
}

func shortID(id string) string {
	if len(id) > 8 {
		return id[:8]
	}
	return id
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	return s
}

// printRetrieved shows what memory gave a step: each guideline with its similarity and the rule
// of retrieval that chose it.
func printRetrieved(w io.Writer, ev protocol.Event) {
	step := ""
	if ev.StepID != "" {
		step = " for step " + ev.StepID
	}
	if len(ev.Guidelines) == 0 {
		fmt.Fprintf(w, "  memory%s: no guideline retrieved\n", step)
		return
	}
	fmt.Fprintf(w, "  memory%s: %d guideline(s) retrieved\n", step, len(ev.Guidelines))
	for _, g := range ev.Guidelines {
		fmt.Fprintf(w, "    %.3f %-9s %-7s %s  %s\n", g.Score, g.Tier, g.Polarity, shortID(g.ID), clipText(g.Text, 100))
		if g.Why != "" {
			fmt.Fprintf(w, "          why: %s\n", g.Why)
		}
	}
}

// printDecisions shows everything the miner decided for the session, skipped lessons included,
// each with its reason.
func printDecisions(w io.Writer, ev *protocol.Event) {
	text := map[string]protocol.Candidate{}
	for _, c := range ev.Mined {
		text[c.Key] = c
	}
	if len(ev.Ingested) == 0 {
		fmt.Fprintf(w, "  miner: nothing to learn from this session (%d candidate(s))\n", len(ev.Mined))
	}
	for _, a := range ev.Ingested {
		c := text[a.Key]
		fmt.Fprintf(w, "  miner: %-10s %s %s: %s\n", a.Action, shortID(a.EntryID), c.Polarity, clipText(c.Text, 100))
		if a.Detail != "" {
			fmt.Fprintf(w, "         why: %s\n", a.Detail)
		}
	}
	if fb := ev.Attrs; len(fb) > 0 {
		for _, k := range []string{"helpful", "harmful", "followed"} {
			if v := fb[k]; v != "" {
				fmt.Fprintf(w, "  miner: marked %s: %s\n", k, v)
			}
		}
	}
}
