package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/skein-mesh/skein/gateway"
	"github.com/skein-mesh/skein/pkg/bus"
	"github.com/skein-mesh/skein/pkg/delta"
	"github.com/skein-mesh/skein/pkg/protocol"
	"github.com/skein-mesh/skein/pkg/service"
	"github.com/skein-mesh/skein/pkg/session"
	"github.com/skein-mesh/skein/pkg/trace"
)

func init() { extraCommands = append(extraCommands, newChatCmd) }

const chatHelp = "type a message; /cancel stops the running turn, /usage totals the conversation, /memory [QUERY] shows what the mesh remembers, /quit (or end of input) leaves"

func newChatCmd() *cobra.Command {
	var conversation, agent, from string
	cmd := &cobra.Command{
		Use:   "chat [--session-id ID | --from TURN]",
		Short: "Talk with an agent: each message is a turn of one conversation, traced and mined like a session",
		Long: "chat reads messages from stdin. The first starts a session (or, with --session-id, continues that\n" +
			"finished session; with --from, starts a new conversation that continues the transcript of that\n" +
			"finished turn, leaving its own conversation as it was); every later one continues the conversation\n" +
			"with its whole transcript (compacted by the usual rules, so the provider's cache keeps reading the\n" +
			"stable prefix). Every message is a new turn, the same text too; its turn id is minted before the\n" +
			"first try, so a retried submit is the same turn. Progress lines (tool calls, thoughts) stream as\n" +
			"they happen, and on a terminal so does the model's text as it is generated; elsewhere the answer\n" +
			"prints whole when the turn ends. " +
			chatHelp + ". Ctrl-C cancels the running turn; a second Ctrl-C leaves.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if conversation != "" && from != "" {
				return &exitError{code: protocol.ExitUsage, msg: "skein: --session-id continues a conversation, --from forks one: give one of them"}
			}
			if err := checkID(protocol.IDSession, conversation); err != nil {
				return err
			}
			if err := checkID(protocol.IDSession, from); err != nil {
				return err
			}
			if err := checkID(protocol.IDAgent, agent); err != nil {
				return err
			}
			cfg, err := loadConfig(cmd)
			if err != nil {
				return configError(err)
			}
			flagURL, _ := cmd.Flags().GetString("nats")
			if service.NATSURL(flagURL, cfg) == "" {
				if err := checkKeys(cfg, nil); err != nil {
					return err
				}
			}
			conn, names, _, closeMesh, err := dialMeshFull(cmd, cfg)
			if err != nil {
				return err
			}
			defer closeMesh()
			if from != "" && agent == "" {
				// A fork continues with the agent of the turn it forks.
				if agent, err = sessionAgent(meshEnv{cfg: cfg, conn: conn, names: names}, from); err != nil {
					return err
				}
			}
			if agent == "" {
				agent = cfg.Agent.Name
			}
			c := &chat{cmd: cmd, env: meshEnv{cfg: cfg, conn: conn, names: names}, agent: agent, conversation: conversation, from: from,
				out: cmd.OutOrStdout(), errw: cmd.ErrOrStderr()}
			return c.loop(cmd.InOrStdin())
		},
	}
	cmd.Flags().StringVar(&conversation, "session-id", "", "continue this finished session's conversation")
	cmd.Flags().StringVar(&from, "from", "", "fork: start a new conversation from this finished turn, sharing the transcript up to it")
	cmd.Flags().StringVar(&agent, "agent", "", "agent to talk with (default: agent.name from the config; a fork keeps its turn's agent)")
	return cmd
}

type chat struct {
	cmd          *cobra.Command
	env          meshEnv
	agent        string
	conversation string
	from         string // the turn the first message forks, until it is sent
	turns        []string
	usage        map[string]*protocol.UsageReport
	lastMessage  string
	out, errw    io.Writer
}

type turnEnd struct {
	session string
	err     error
}

func (c *chat) loop(in io.Reader) error {
	ctx := c.cmd.Context()
	if ctx == nil {
		ctx = context.Background()
	}
	c.usage = map[string]*protocol.UsageReport{}
	lines := make(chan string)
	go func() {
		sc := bufio.NewScanner(in)
		sc.Buffer(make([]byte, 64<<10), protocol.MaxTaskBytes+1024)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sigs)
	fmt.Fprintln(c.errw, "skein chat ·", chatHelp)
	running := ""
	ended := make(chan turnEnd, 1)
	closing := false
	// Lines typed (or piped) while a turn runs wait their turn, in order; /cancel and /quit act
	// at once.
	var queued []string
	handle := func(line string) (quit bool) {
		switch {
		case line == "":
		case line == "/quit" || line == "/exit":
			if running != "" {
				c.cancel(running)
				<-ended
			}
			return true
		case line == "/cancel":
			if running == "" {
				fmt.Fprintln(c.errw, "nothing is running")
			} else {
				c.cancel(running)
			}
		case running != "":
			queued = append(queued, line)
		case line == "/usage":
			c.printUsage()
		case line == "/memory" || strings.HasPrefix(line, "/memory "):
			c.memory(strings.TrimSpace(strings.TrimPrefix(line, "/memory")))
		case strings.HasPrefix(line, "/"):
			fmt.Fprintln(c.errw, "unknown command;", chatHelp)
		default:
			id, err := c.send(ctx, line)
			if err != nil {
				fmt.Fprintln(c.errw, "skein:", err)
				return false
			}
			running = id
			go func() { ended <- turnEnd{session: id, err: c.follow(ctx, id)} }()
		}
		return false
	}
	for {
		for running == "" && len(queued) > 0 {
			next := queued[0]
			queued = queued[1:]
			if handle(next) {
				return nil
			}
		}
		if running == "" {
			if closing {
				return nil
			}
			fmt.Fprint(c.errw, "you> ")
		}
		select {
		case <-sigs:
			if running == "" {
				return nil
			}
			c.cancel(running)
			select {
			case <-sigs:
				return &exitError{code: 130, msg: "skein: leaving without waiting"}
			case e := <-ended:
				running = ""
				c.report(e)
			}
		case e := <-ended:
			running = ""
			c.report(e)
		case line, ok := <-lines:
			if !ok {
				if running == "" {
					return nil
				}
				closing = true // end of input: let the running turn finish, then leave
				lines = nil
				continue
			}
			if handle(strings.TrimSpace(line)) {
				return nil
			}
		}
	}
}

// send submits a message: a new session (or a fork) first, then a turn of its conversation.
// The session and turn ids are minted before the first try, so the tries bus.Request makes are
// one turn, while the same text sent again is another.
func (c *chat) send(ctx context.Context, text string) (string, error) {
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	var rep protocol.SubmitReply
	req := protocol.SubmitRequest{SessionID: c.conversation, Agent: c.agent, Task: text, Caller: "chat", TurnID: gateway.NewTurnID()}
	if c.conversation == "" {
		req.SessionID, req.From = gateway.NewSessionID(), c.from
	}
	if err := bus.Request(sctx, c.env.conn.NC, c.env.names.Submit(), &req, &rep, 5*time.Second); err != nil {
		return "", fmt.Errorf("submit: %w", err)
	}
	if err := rep.Err(); err != nil {
		return "", err
	}
	if c.conversation == "" {
		c.conversation, c.from = rep.SessionID, ""
	}
	if !slices.Contains(c.turns, rep.SessionID) {
		c.turns = append(c.turns, rep.SessionID)
	}
	c.lastMessage = text
	return rep.SessionID, nil
}

// follow streams a turn's progress and prints its answer (as it is generated, on a terminal).
func (c *chat) follow(ctx context.Context, id string) error {
	var final protocol.Event
	var text *textStream
	if w, h, ok := terminalOut(c.out); ok {
		text = newTextStream(c.out, w, h, c.agent+"> ")
		sub, err := delta.Follow(c.env.conn.NC, c.env.names, id, text.add)
		if err != nil {
			fmt.Fprintf(c.errw, "skein: the answer shows when it is complete (%v)\n", err)
			text = nil
		} else {
			defer func() { _ = sub.Unsubscribe() }()
		}
	}
	shown := func(s string) bool { return text != nil && text.showed(s) }
	return trace.Follow(ctx, c.env.conn.JS, c.env.names, id, func(ev protocol.Event) bool {
		switch {
		case ev.Type == protocol.EvToolCall:
			status := "ok"
			if ev.Result != nil && !ev.Result.OK {
				status = "failed: " + firstLine(ev.Result.Error)
			}
			fmt.Fprintf(c.errw, "  · %s %s\n", ev.Tool, status)
		case ev.Type == protocol.EvThought:
			if !shown(ev.Text) {
				fmt.Fprintf(c.errw, "  · %s\n", firstLine(ev.Text))
			}
		case ev.Type.Terminal():
			final = ev
		case ev.Type == protocol.EvUsage && ev.Role != protocol.RoleMiner:
			r := ev.Report
			c.usage[id] = r
			if text != nil {
				text.end()
			}
			if final.Text != "" && !shown(final.Text) {
				fmt.Fprintf(c.out, "%s> %s\n", c.agent, final.Text)
			}
			line := fmt.Sprintf("  (%s · turn %s", final.Outcome, id)
			if r != nil {
				line += fmt.Sprintf(" · in %d / out %d tokens · %s", r.InputTokens+r.CacheCreationInputTokens+r.CacheReadInputTokens,
					r.OutputTokens, trace.Cost(r.CostUSD))
			}
			if final.Reason != "" {
				line += " · " + firstLine(final.Reason)
			}
			fmt.Fprintln(c.errw, line+")")
			return false
		}
		return true
	})
}

// sessionAgent is the agent of a recorded session (its id checked by the caller).
func sessionAgent(env meshEnv, id string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	records, err := session.Open(ctx, env.conn.JS, env.names)
	if err != nil {
		return "", err
	}
	s, err := records.Get(ctx, id)
	if err != nil {
		if errors.Is(err, session.ErrNotFound) {
			return "", &exitError{code: protocol.ExitNotFound, msg: "skein: no session " + id + " to fork from"}
		}
		return "", err
	}
	return s.Agent, nil
}

func (c *chat) report(e turnEnd) {
	if e.err != nil {
		fmt.Fprintf(c.errw, "skein: following turn %s: %v (see `skein trace show %s`)\n", e.session, e.err, e.session)
	}
}

func (c *chat) cancel(id string) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	if _, err := cancelSession(ctx, c.env.conn, c.env.names, id, cliUser()+" (chat)", "cancelled in chat"); err != nil {
		fmt.Fprintln(c.errw, "skein: cancel:", err)
		return
	}
	fmt.Fprintf(c.errw, "cancelling turn %s\n", id)
}

func (c *chat) printUsage() {
	var in, out, cw, cr int64
	cost, known := 0.0, true
	for _, id := range c.turns {
		r := c.usage[id]
		if r == nil {
			continue
		}
		in, out, cw, cr = in+r.InputTokens, out+r.OutputTokens, cw+r.CacheCreationInputTokens, cr+r.CacheReadInputTokens
		if r.CostUSD == nil {
			known = false
		} else {
			cost += *r.CostUSD
		}
	}
	c2 := &cost
	if !known {
		c2 = nil
	}
	fmt.Fprintf(c.errw, "conversation %s: %d turn(s) · in %d / out %d tokens (cache write %d, read %d) · %s\n",
		c.conversation, len(c.turns), in, out, cw, cr, trace.Cost(c2))
}

func (c *chat) memory(query string) {
	if query == "" {
		query = c.lastMessage
	}
	mc, err := memReady(c.cmd, c.env)
	if err != nil {
		fmt.Fprintln(c.errw, err)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	req := protocol.MemoryInspectRequest{Agent: c.agent, TopK: 5, Query: query}
	rep, err := mc.Inspect(ctx, req)
	if err != nil {
		fmt.Fprintln(c.errw, "skein: memory:", err)
		return
	}
	printInspect(c.errw, req, rep)
}
