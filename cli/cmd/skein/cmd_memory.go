package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/skein-mesh/skein/memoryd"
	"github.com/skein-mesh/skein/miner"
	"github.com/skein-mesh/skein/pkg/memory"
	"github.com/skein-mesh/skein/pkg/protocol"
)

// The memory commands talk to memoryd over NATS, never to a store directly, so they work the
// same against the KV store and Milvus, and against a local or a remote mesh.

func init() {
	extraCommands = append(extraCommands, newInspectMemoryCmd, newMemoryCmd, newIngestTracesCmd, newReplayCmd)
}

func memClient(env meshEnv) memoryd.Client {
	return memoryd.Client{NC: env.conn.NC, Names: env.names, PerTry: 30 * time.Second}
}

// memReady returns a client once memoryd answers its health check, or an error that says how
// to get one running: without it every request would wait for a responder forever.
func memReady(cmd *cobra.Command, env meshEnv) (memoryd.Client, error) {
	c := memClient(env)
	ctx, cancel := context.WithTimeout(cmd.Context(), 20*time.Second)
	defer cancel()
	h, err := c.Health(ctx)
	if err != nil {
		return c, wireExit(err, fmt.Sprintf("skein: memoryd is not answering on %s: %v\n"+
			"start it (`skein up` runs every service, or run the memoryd binary against this mesh) and check its log; "+
			"in process it needs the embedding model (`make setup`) or memory.embedder: ollama|openai",
			env.names.Memory(protocol.MemHealth), err))
	}
	if !h.OK && h.Error != "" {
		fmt.Fprintln(cmd.ErrOrStderr(), "skein: warning:", h.Error)
	}
	return c, nil
}

func newInspectMemoryCmd() *cobra.Command {
	var topK int
	var tier, agent, id, kind string
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "inspect-memory [QUERY]",
		Short: "Show memory counts per tier and the guidelines nearest a query, with scores and history (--id: one rule's history and the rules it is linked to)",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if tier != "" && tier != string(protocol.TierTactical) && tier != string(protocol.TierStrategic) {
				return usageError(cmd, fmt.Errorf("--tier must be tactical or strategic, got %q", tier))
			}
			if id != "" {
				return withMesh(cmd, func(env meshEnv) error { return inspectOne(cmd, env, id, asJSON) })
			}
			k, err := kindFlag(kind)
			if err != nil {
				return err
			}
			return withMesh(cmd, func(env meshEnv) error {
				req := protocol.MemoryInspectRequest{Agent: agent, TopK: topK, Tier: protocol.Tier(tier), Kind: k}
				if len(args) == 1 {
					req.Query = args[0]
				}
				c, err := memReady(cmd, env)
				if err != nil {
					return err
				}
				rep, err := c.Inspect(cmd.Context(), req)
				if err != nil {
					return err
				}
				if asJSON {
					return writeJSON(cmd.OutOrStdout(), rep)
				}
				printInspect(cmd.OutOrStdout(), req, rep)
				return nil
			})
		},
	}
	cmd.Flags().IntVar(&topK, "top-k", 10, "how many hits to show")
	cmd.Flags().StringVar(&tier, "tier", "", "only this tier (tactical or strategic)")
	cmd.Flags().StringVar(&agent, "agent", "", "only this agent (default: every agent)")
	cmd.Flags().StringVar(&id, "id", "", "show this entry's history and the entries it supersedes or was superseded by")
	cmd.Flags().StringVar(&kind, "kind", "all", "only entries of this kind: guideline, case, skill or all")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

// inspectOne prints one entry, its history, and the entries linked to it by supersession.
func inspectOne(cmd *cobra.Command, env meshEnv, id string, asJSON bool) error {
	c, err := memReady(cmd, env)
	if err != nil {
		return err
	}
	e, err := c.Get(cmd.Context(), id)
	if err != nil {
		return wireExit(err, "skein: "+err.Error())
	}
	linked := map[string]*memory.Entry{}
	for _, l := range append([]string{e.SupersededBy}, e.Supersedes...) {
		if l == "" || linked[l] != nil {
			continue
		}
		if x, err := c.Get(cmd.Context(), l); err == nil {
			linked[l] = x
		}
	}
	w := cmd.OutOrStdout()
	if asJSON {
		return writeJSON(w, struct {
			Entry  *memory.Entry            `json:"entry"`
			Linked map[string]*memory.Entry `json:"linked,omitempty"`
		}{e, linked})
	}
	kind := ""
	if e.KindOf() != memory.KindGuideline {
		kind = e.KindOf() + " "
	}
	fmt.Fprintf(w, "%s  %s%s %s %s  %s\n  %s\n", e.ID, kind, e.Status, e.Tier, e.Polarity, sourceOf(*e), e.Text)
	fmt.Fprintf(w, "  sessions %d  helpful %d  harmful %d  utility %+.2f (echo %d, fizzle %d)\n", e.DistinctSessions(), e.Helpful, e.Harmful, e.Utility, e.Echoes, e.Fizzles)
	printBody(w, *e, "  ")
	printHistory(w, *e, "  ")
	link := func(rel, l string) {
		if x := linked[l]; x != nil {
			fmt.Fprintf(w, "  %s %s (%s %s): %s\n", rel, l, x.Status, x.Tier, clipText(x.Text, 90))
		} else {
			fmt.Fprintf(w, "  %s %s (gone)\n", rel, l)
		}
	}
	if e.SupersededBy != "" {
		link("superseded by", e.SupersededBy)
	}
	for _, l := range e.Supersedes {
		link("supersedes", l)
	}
	return nil
}

// printHistory writes an entry's history, one change a line, oldest first.
func printHistory(w io.Writer, e memory.Entry, indent string) {
	for _, h := range e.History {
		line := indent + h.At.UTC().Format(time.RFC3339) + "  " + h.Event
		if h.Other != "" {
			line += " " + h.Other
		}
		if h.Reason != "" {
			line += ": " + h.Reason
		}
		fmt.Fprintln(w, line)
	}
}

func printInspect(w io.Writer, req protocol.MemoryInspectRequest, rep *protocol.MemoryInspectReply) {
	fmt.Fprintf(w, "memory (embedding model %s)\n", rep.Model)
	if len(rep.Counts) == 0 {
		fmt.Fprintln(w, "  empty")
	}
	type tally struct{ strategic, tactical, inactive int }
	by := map[string]*tally{}
	var agents []string
	for _, c := range rep.Counts {
		t := by[c.Agent]
		if t == nil {
			t = &tally{}
			by[c.Agent] = t
			agents = append(agents, c.Agent)
		}
		switch {
		case c.Status != memory.StatusActive:
			t.inactive += c.N
		case c.Tier == protocol.TierStrategic:
			t.strategic += c.N
		default:
			t.tactical += c.N
		}
	}
	kinds := kindCounts(rep.Counts)
	for _, a := range agents {
		t := by[a]
		fmt.Fprintf(w, "  %-16s strategic %d  tactical %d  superseded/retired/quarantined %d", a, t.strategic, t.tactical, t.inactive)
		if k := kinds[a]; len(k) > 0 {
			fmt.Fprintf(w, "  (of them: %d cases, %d skills)", k[memory.KindCase], k[memory.KindSkill])
		}
		fmt.Fprintln(w)
	}
	if len(rep.Hits) == 0 {
		if req.Query != "" {
			fmt.Fprintf(w, "no guidelines match %q\n", req.Query)
		}
		return
	}
	if req.Query != "" {
		fmt.Fprintf(w, "top %d for %q, ranked as retrieval ranks (similarity nudged by helpful/harmful marks and utility):\n", len(rep.Hits), req.Query)
	} else {
		fmt.Fprintf(w, "most established guidelines:\n")
	}
	for i, h := range rep.Hits {
		e := h.Entry
		score := "     "
		if req.Query != "" {
			score = fmt.Sprintf("%.3f", h.Score)
		}
		fmt.Fprintf(w, "%3d. %s  %-9s %-7s %s  sessions %d  hits %d  helpful %d  harmful %d  utility %+.2f  %s  %s\n", i+1, score, e.Tier, e.Polarity,
			toolList(e.Tools), e.DistinctSessions(), e.Hits, e.Helpful, e.Harmful, e.Utility, sourceOf(e), e.ID)
		if e.Case != nil || e.Skill != nil {
			fmt.Fprintf(w, "       %s %s\n", e.KindOf(), e.Text)
			printBody(w, e, "       ")
		} else {
			fmt.Fprintf(w, "       %s\n", e.Text)
		}
		if h.Why != "" {
			fmt.Fprintf(w, "       why: %s\n", h.Why)
		}
		printHistory(w, e, "       ")
	}
}

// sourceLabel is the one-word source of an entry, for tables.
func sourceLabel(e memory.Entry) string {
	l, _, _ := strings.Cut(sourceOf(e), " ")
	return l
}

// sourceOf says who wrote an entry: mined, subagent (with the sub-agent and its session),
// remembered (with the session), imported.
func sourceOf(e memory.Entry) string {
	switch e.Source {
	case memory.SourceMiner, "":
		return "mined"
	case memory.SourceHuman:
		return "imported"
	case memory.SourceSubagent:
		if e.SourceAgent != "" {
			return fmt.Sprintf("subagent %s (session %s)", e.SourceAgent, e.SourceSession)
		}
		return "subagent"
	case memory.SourceRemembered:
		if e.SourceSession != "" {
			return fmt.Sprintf("remembered (session %s)", e.SourceSession)
		}
		return "remembered"
	}
	return e.Source
}

func toolList(tools []string) string {
	if len(tools) == 0 {
		return "[]"
	}
	return "[" + strings.Join(tools, ",") + "]"
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func newMemoryCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "memory", Short: "List, show, export, import, evict, migrate and repair memory entries"}
	cmd.AddCommand(newMemoryListCmd(), newMemoryShowCmd(), newMemoryExportCmd(), newMemoryImportCmd(),
		newMemoryEvictCmd(), newMemoryMigrateCmd(), newMemoryRepairCmd())
	return cmd
}

// withMemory runs fn with a client of a memoryd that answers, on the mesh the flags name.
func withMemory(cmd *cobra.Command, fn func(memoryd.Client) error) error {
	return withMesh(cmd, func(env meshEnv) error {
		c, err := memReady(cmd, env)
		if err != nil {
			return err
		}
		return fn(c)
	})
}

func newMemoryListCmd() *cobra.Command {
	var agent, tier, kind string
	var all, asJSON bool
	list := &cobra.Command{
		Use: "list", Short: "List memory entries: guidelines, cases, skills (active ones unless --all)", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			k, err := kindFlag(kind)
			if err != nil {
				return err
			}
			req := protocol.MemoryListRequest{Agent: agent, Tier: protocol.Tier(tier), Kind: k}
			if all {
				req.Status = memory.StatusAny
			}
			return withMemory(cmd, func(c memoryd.Client) error {
				es, err := c.ListAll(cmd.Context(), req)
				if err != nil {
					return err
				}
				if asJSON {
					return writeJSON(cmd.OutOrStdout(), es)
				}
				printEntries(cmd.OutOrStdout(), es)
				return nil
			})
		},
	}
	list.Flags().StringVar(&agent, "agent", "", "only this agent")
	list.Flags().StringVar(&tier, "tier", "", "only this tier (tactical or strategic)")
	list.Flags().BoolVar(&all, "all", false, "include superseded, retired and quarantined entries")
	list.Flags().StringVar(&kind, "kind", "all", "only this kind: guideline, case, skill or all")
	list.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return list
}

// printEntries prints one line per entry (entryLine).
func printEntries(w io.Writer, es []memory.Entry) {
	if len(es) == 0 {
		fmt.Fprintln(w, "no entries")
	}
	for _, e := range es {
		fmt.Fprintln(w, entryLine(e))
	}
}

func newMemoryShowCmd() *cobra.Command {
	return &cobra.Command{
		Use: "show ID", Short: "Print one entry as JSON", Args: idArg(protocol.IDMemory),
		RunE: func(cmd *cobra.Command, args []string) error {
			return withMemory(cmd, func(c memoryd.Client) error {
				e, err := c.Get(cmd.Context(), args[0])
				if err != nil {
					return wireExit(err, "skein: "+err.Error())
				}
				return writeJSON(cmd.OutOrStdout(), e)
			})
		},
	}
}

func newMemoryExportCmd() *cobra.Command {
	var agent string
	export := &cobra.Command{
		Use: "export [FILE]", Short: "Write every entry (any kind, any status) as JSONL to FILE or stdout", Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return withMemory(cmd, func(c memoryd.Client) error {
				es, err := c.ListAll(cmd.Context(), protocol.MemoryListRequest{Agent: agent, Kind: memory.KindAny, Status: memory.StatusAny})
				if err != nil {
					return err
				}
				if len(args) == 0 {
					return writeJSONL(cmd.OutOrStdout(), es)
				}
				f, err := openPrivate(args[0])
				if err != nil {
					return err
				}
				defer f.Close()
				if err := writeJSONL(f, es); err != nil {
					return err
				}
				fmt.Fprintf(cmd.ErrOrStderr(), "exported %d entries to %s\n", len(es), args[0])
				return nil
			})
		},
	}
	export.Flags().StringVar(&agent, "agent", "", "only this agent")
	return export
}

// writeJSONL writes one entry per line, the form readJSONL (memory import) reads.
func writeJSONL(w io.Writer, es []memory.Entry) error {
	bw := bufio.NewWriter(w)
	enc := json.NewEncoder(bw)
	for _, e := range es {
		if err := enc.Encode(e); err != nil {
			return err
		}
	}
	return bw.Flush()
}

func newMemoryImportCmd() *cobra.Command {
	var replace, asJSON bool
	imp := &cobra.Command{
		Use: "import FILE", Short: "Read JSONL entries (from export, or hand-written) into memory", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			entries, err := readJSONL(args[0])
			if errors.Is(err, fs.ErrNotExist) {
				return fail(protocol.ExitNotFound, "%v", err)
			} else if err != nil {
				return fail(protocol.ExitDataErr, "%v", err)
			}
			return withMemory(cmd, func(c memoryd.Client) error {
				res, err := importEntries(cmd, c, entries, replace)
				if err != nil {
					return err
				}
				if err := printImport(cmd.OutOrStdout(), res, replace, asJSON); err != nil {
					return err
				}
				if len(res.Problems) > 0 {
					return &exitError{code: protocol.ExitDataErr} // some entries were refused as they are
				}
				return nil
			})
		},
	}
	imp.Flags().BoolVar(&replace, "replace", false, "overwrite entries whose id exists")
	imp.Flags().BoolVar(&asJSON, "json", false, `print {"imported", "skipped", "problems": [...]} (exit 1 when there are problems)`)
	return imp
}

// importBatch is how many entries one import request carries: small batches keep each request
// under the NATS payload limit.
const importBatch = 100

// importEntries sends entries in batches, reporting each batch after the first on stderr so a
// large import shows progress, and adds up memoryd's answers.
func importEntries(cmd *cobra.Command, c memoryd.Client, entries []memory.Entry, replace bool) (memoryImportJSON, error) {
	res := memoryImportJSON{Problems: []string{}}
	for i := 0; i < len(entries); i += importBatch {
		if i > 0 {
			fmt.Fprintf(cmd.ErrOrStderr(), "import: %d/%d entries sent\n", i, len(entries))
		}
		rep, err := c.Import(cmd.Context(), protocol.MemoryImportRequest{Entries: entries[i:min(i+importBatch, len(entries))], Replace: replace})
		if err != nil {
			return res, err
		}
		res.Imported += rep.Imported
		res.Skipped += rep.Skipped
		res.Problems = append(res.Problems, rep.Problems...)
	}
	return res, nil
}

func printImport(w io.Writer, res memoryImportJSON, replace, asJSON bool) error {
	if asJSON {
		return writeJSON(w, res)
	}
	hint := "; --replace overwrites"
	if replace {
		hint = ""
	}
	fmt.Fprintf(w, "imported %d, skipped %d (already present%s)\n", res.Imported, res.Skipped, hint)
	for _, p := range res.Problems {
		fmt.Fprintln(w, "  problem:", p)
	}
	return nil
}

func newMemoryEvictCmd() *cobra.Command {
	var dryRun, asJSON bool
	var agent string
	evict := &cobra.Command{
		Use: "evict", Short: "Apply the capacity policy now (least helpful, then least recent)", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return withMemory(cmd, func(c memoryd.Client) error {
				rep, err := c.Evict(cmd.Context(), protocol.MemoryEvictRequest{Agent: agent, DryRun: dryRun})
				if err != nil {
					return err
				}
				w := cmd.OutOrStdout()
				if asJSON {
					if rep.Evicted == nil {
						rep.Evicted = []protocol.MemoryEviction{}
					}
					return writeJSON(w, rep)
				}
				verb := "evicted"
				if rep.DryRun {
					verb = "would evict"
				}
				fmt.Fprintf(w, "%s %d entries (capacity %d per agent and tier)\n", verb, len(rep.Evicted), rep.Capacity)
				for _, e := range rep.Evicted {
					fmt.Fprintf(w, "  %s  %-12s %-9s %s\n      %s\n", e.ID, e.Agent, e.Tier, e.Reason, clipText(e.Text, 100))
				}
				return nil
			})
		},
	}
	evict.Flags().BoolVar(&dryRun, "dry-run", false, "only show what would be removed")
	evict.Flags().StringVar(&agent, "agent", "", "only this agent")
	evict.Flags().BoolVar(&asJSON, "json", false, `print {"v", "evicted": [{"id", "agent", "tier", "status", "text", "helpful", "harmful", "last_at", "reason", "polarity"}], "dry_run", "capacity"}`)
	return evict
}

func newMemoryMigrateCmd() *cobra.Command {
	var asJSON bool
	migrate := &cobra.Command{
		Use: "migrate", Short: "Re-embed every entry with memoryd's current embedding model", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return withMemory(cmd, func(c memoryd.Client) error {
				// memoryd re-embeds in one request; say how much there is and keep time while it works.
				if h, err := c.Health(cmd.Context()); err == nil {
					fmt.Fprintf(cmd.ErrOrStderr(), "migrate: re-embedding %d entries with %s\n", h.Entries, h.Model)
				}
				stopTicks := ticker(cmd.ErrOrStderr(), "migrate: still re-embedding", 10*time.Second)
				rep, err := c.Migrate(cmd.Context())
				stopTicks()
				if err != nil {
					return err
				}
				if asJSON {
					return writeJSON(cmd.OutOrStdout(), rep)
				}
				fmt.Fprintf(cmd.OutOrStdout(), "re-embedded %d entries: %s -> %s\n", rep.Reembedded, rep.From, rep.Model)
				return nil
			})
		},
	}
	migrate.Flags().BoolVar(&asJSON, "json", false, `print {"v", "reembedded", "from", "model"}`)
	return migrate
}

func newMemoryRepairCmd() *cobra.Command {
	var asJSON bool
	repair := &cobra.Command{
		Use: "repair", Short: "Bring the Milvus collection back to the memory's records and say what was found", Args: cobra.NoArgs,
		Long: "repair makes the search index hold exactly the entry records in the mesh's memory bucket: records without a\n" +
			"row are indexed, rows of an older revision rewritten, rows without a record deleted. memoryd also does this\n" +
			"once when it starts. The kv store needs no repair (its index is rebuilt from the bucket on every start).",
		RunE: func(cmd *cobra.Command, _ []string) error {
			return withMemory(cmd, func(c memoryd.Client) error {
				stopTicks := ticker(cmd.ErrOrStderr(), "repair: still comparing records and rows", 10*time.Second)
				rep, err := c.Repair(cmd.Context())
				stopTicks()
				if err != nil {
					return err
				}
				if asJSON {
					return writeJSON(cmd.OutOrStdout(), rep)
				}
				if !rep.Repaired {
					fmt.Fprintf(cmd.OutOrStdout(), "memory store %s: nothing to repair (its index is rebuilt from the records on every start)\n", rep.Store)
					return nil
				}
				found := memory.RepairReport{Records: rep.Records, Rows: rep.Rows, Missing: rep.Missing, Stale: rep.Stale, Orphans: rep.Orphans}
				fmt.Fprintf(cmd.OutOrStdout(), "memory store %s: %s\n", rep.Store, found)
				return nil
			})
		},
	}
	repair.Flags().BoolVar(&asJSON, "json", false, `print {"v", "store", "repaired", "records", "rows", "missing", "stale", "orphans"}`)
	return repair
}

func readJSONL(path string) ([]memory.Entry, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []memory.Entry
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	line := 0
	for sc.Scan() {
		line++
		b := strings.TrimSpace(sc.Text())
		if b == "" || strings.HasPrefix(b, "#") {
			continue
		}
		var e memory.Entry
		dec := json.NewDecoder(strings.NewReader(b))
		dec.DisallowUnknownFields() // a misspelt field would otherwise be dropped without a word
		if err := dec.Decode(&e); err != nil {
			return nil, fmt.Errorf("%s:%d: %w", path, line, err)
		}
		if dec.More() {
			return nil, fmt.Errorf("%s:%d: more than one JSON value on the line", path, line)
		}
		out = append(out, e)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return out, nil
}

func clipText(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > n {
		return strings.ToValidUTF8(s[:n], "") + "…"
	}
	return s
}

func printMined(w io.Writer, r *miner.Result) {
	fmt.Fprintf(w, "session %s (%s, %s): %d candidates\n", r.Session, r.Agent, r.Outcome, len(r.Candidates))
	acts := map[string]protocol.IngestAction{}
	for _, a := range r.Actions {
		acts[a.Key] = a
	}
	for _, c := range r.Candidates {
		a := acts[c.Key]
		fmt.Fprintf(w, "  %-10s %-7s %s\n", a.Action, c.Polarity, c.Text)
		if a.Detail != "" || a.EntryID != "" {
			fmt.Fprintf(w, "             entry %s %s\n", a.EntryID, a.Detail)
		}
	}
	if fb := r.Feedback; len(fb.Helpful)+len(fb.Harmful)+len(fb.Followed) > 0 {
		fmt.Fprintf(w, "  feedback: helpful %d, harmful %d, followed %d\n", len(fb.Helpful), len(fb.Harmful), len(fb.Followed))
	}
	if r.Usage.InputTokens+r.Usage.OutputTokens > 0 {
		fmt.Fprintf(w, "  mining tokens: %d in, %d out\n", r.Usage.InputTokens, r.Usage.OutputTokens)
	}
}

func newIngestTracesCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "ingest-traces SESSION",
		Short: "Re-mine one session's trace into memory (idempotent)",
		Args:  idArg(protocol.IDSession),
		RunE: func(cmd *cobra.Command, args []string) error {
			return withMesh(cmd, func(env meshEnv) error {
				if _, err := memReady(cmd, env); err != nil {
					return err
				}
				r, err := miner.MineSession(cmd.Context(), minerDeps(env), args[0])
				if errors.Is(err, miner.ErrNoTrace) {
					return fail(protocol.ExitNotFound, "no trace for session %s", args[0])
				}
				if r != nil {
					if asJSON {
						if jerr := writeJSON(cmd.OutOrStdout(), minedJSON(r)); jerr != nil {
							return jerr
						}
					} else {
						printMined(cmd.OutOrStdout(), r)
					}
				}
				return err
			})
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, `print what mining did: {"session", "agent", "outcome", "candidates", "cases"?, "case_skips"?, "actions", "feedback", "usage"}`)
	return cmd
}

// minedJSON fills a mining result's empty lists, so `--json` always has arrays to read.
func minedJSON(r *miner.Result) *miner.Result {
	out := *r
	if out.Candidates == nil {
		out.Candidates = []protocol.Candidate{}
	}
	if out.Actions == nil {
		out.Actions = []protocol.IngestAction{}
	}
	return &out
}

// memoryImportJSON is `skein memory import --json`.
type memoryImportJSON struct {
	Imported int      `json:"imported"`
	Skipped  int      `json:"skipped"`
	Problems []string `json:"problems"`
}

// replayJSON is `skein replay --json`: each session mined, as ingest-traces --json prints it.
type replayJSON struct {
	Replayed int             `json:"replayed"`
	Sessions []*miner.Result `json:"sessions"`
}

func minerDeps(env meshEnv) miner.Deps {
	return miner.Deps{Conn: env.conn, Names: env.names, Config: env.cfg, Logger: meshLogger().With("role", "miner")}
}

func newReplayCmd() *cobra.Command {
	var since time.Duration
	var fromSeq uint64
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "replay (--since DURATION | --from-seq N)",
		Short: "Re-mine every session that ended in a range of the trace stream (idempotent)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if (since > 0) == (fromSeq > 0) {
				return usageError(cmd, errors.New("replay needs exactly one of --since DURATION or --from-seq N"))
			}
			return withMesh(cmd, func(env meshEnv) error {
				if _, err := memReady(cmd, env); err != nil {
					return err
				}
				w := cmd.OutOrStdout()
				d := minerDeps(env)
				if !asJSON {
					// Each session is printed as soon as it is mined, numbered, so a long replay
					// shows how far it has come.
					d.Progress = func(done, total int, r *miner.Result) {
						fmt.Fprintf(w, "[%d/%d] ", done, total)
						printMined(w, r)
					}
				}
				rs, err := miner.Replay(cmd.Context(), d, since, fromSeq)
				if asJSON {
					out := replayJSON{Replayed: len(rs), Sessions: []*miner.Result{}}
					for _, r := range rs {
						out.Sessions = append(out.Sessions, minedJSON(r))
					}
					if jerr := writeJSON(w, out); jerr != nil {
						return jerr
					}
					return err
				}
				fmt.Fprintf(w, "replayed %d sessions\n", len(rs))
				return err
			})
		},
	}
	cmd.Flags().DurationVar(&since, "since", 0, "sessions that ended within this long ago (e.g. 24h)")
	cmd.Flags().Uint64Var(&fromSeq, "from-seq", 0, "sessions that ended at or after this TRACE stream sequence")
	cmd.Flags().BoolVar(&asJSON, "json", false, `print {"replayed", "sessions": [...as ingest-traces --json...]}`)
	return cmd
}

// openPrivate opens path for writing, truncated, readable by its owner only: memory is private.
// The mode given to OpenFile applies only to a file it creates, so an existing regular file is
// closed too (through the open descriptor, so the file checked is the file written); a device
// or pipe (/dev/stdout) is left as it is.
func openPrivate(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return nil, err
	}
	st, err := f.Stat()
	if err == nil && st.Mode().IsRegular() && st.Mode().Perm() != 0o600 {
		err = f.Chmod(0o600)
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("%s: make it private: %w", path, err)
	}
	return f, nil
}

// ticker prints what is still going on, with the time spent, every interval until stopped.
func ticker(w io.Writer, what string, every time.Duration) (stop func()) {
	start, done := time.Now(), make(chan struct{})
	go func() {
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				fmt.Fprintf(w, "%s (%s)\n", what, time.Since(start).Round(time.Second))
			}
		}
	}()
	return func() { close(done) }
}
