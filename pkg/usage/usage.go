// Package usage prices model calls and totals them per session.
//
// Prices live in one file, prices.yaml, compiled in with go:embed. Cost is computed the way
// the providers bill: fresh input, output, cache writes (by TTL) and cache reads each at their
// own price. An unpriced model is "unknown", never free.
package usage

import (
	_ "embed"
	"fmt"
	"maps"
	"regexp"
	"sort"
	"strings"
	"sync"
	"sync/atomic"

	"gopkg.in/yaml.v3"

	"github.com/skein-mesh/skein/pkg/protocol"
)

//go:embed prices.yaml
var pricesYAML []byte

// Price is one model's price per million tokens, with the cache prices resolved.
type Price struct {
	Input        float64
	Output       float64
	CacheRead    float64
	CacheWrite5m float64
	CacheWrite1h float64
}

// Entry is one model of the table as written in prices.yaml and in agent.yaml's `models:`.
type Entry struct {
	Input         *float64 `yaml:"input"`
	Output        *float64 `yaml:"output"`
	CacheRead     *float64 `yaml:"cache_read"`
	CacheWrite5m  *float64 `yaml:"cache_write_5m"`
	CacheWrite1h  *float64 `yaml:"cache_write_1h"`
	ContextWindow int      `yaml:"context_window"`
	MaxOutput     int      `yaml:"max_output"`
	Aliases       []string `yaml:"aliases"`
}

type priceEntry = Entry

// Limits are a model's context window and output limit in tokens (0: not known).
type Limits struct {
	ContextWindow int
	MaxOutput     int
}

// Table maps model ids to prices and limits.
type Table struct {
	prices map[string]Price
	limits map[string]Limits
}

var (
	defaultOnce  sync.Once
	defaultTable *Table
)

var override atomic.Pointer[Table]

// Default returns the table in use: the embedded prices.yaml, with agent.yaml's `models:` applied.
func Default() *Table {
	if t := override.Load(); t != nil {
		return t
	}
	return embedded()
}

func embedded() *Table {
	defaultOnce.Do(func() {
		t, err := ParseTable(pricesYAML)
		if err != nil {
			// The file is compiled in and covered by tests: a parse error is a build defect.
			panic("usage: embedded prices.yaml: " + err.Error())
		}
		defaultTable = t
	})
	return defaultTable
}

// ParseTable reads a price table in the prices.yaml format.
func ParseTable(data []byte) (*Table, error) {
	var doc struct {
		Models map[string]priceEntry `yaml:"models"`
	}
	dec := yaml.NewDecoder(strings.NewReader(string(data)))
	dec.KnownFields(true)
	if err := dec.Decode(&doc); err != nil {
		return nil, fmt.Errorf("price table: %w", err)
	}
	t := &Table{prices: map[string]Price{}, limits: map[string]Limits{}}
	for name, e := range doc.Models {
		if e.Input == nil || e.Output == nil {
			return nil, fmt.Errorf("price table: model %q: input and output are required", name)
		}
		if e.ContextWindow < 0 || e.MaxOutput < 0 {
			return nil, fmt.Errorf("price table: model %q: context_window and max_output must be >= 0", name)
		}
		p := price(e)
		for _, id := range append([]string{name}, e.Aliases...) {
			if _, dup := t.prices[id]; dup {
				return nil, fmt.Errorf("price table: model %q listed twice", id)
			}
			t.prices[id] = p
			t.limits[id] = Limits{ContextWindow: e.ContextWindow, MaxOutput: e.MaxOutput}
		}
	}
	return t, nil
}

func price(e Entry) Price {
	p := Price{Input: *e.Input, Output: *e.Output,
		CacheRead: 0.1 * *e.Input, CacheWrite5m: 1.25 * *e.Input, CacheWrite1h: 2 * *e.Input}
	if e.CacheRead != nil {
		p.CacheRead = *e.CacheRead
	}
	if e.CacheWrite5m != nil {
		p.CacheWrite5m = *e.CacheWrite5m
	}
	if e.CacheWrite1h != nil {
		p.CacheWrite1h = *e.CacheWrite1h
	}
	return p
}

// With returns a copy of t with entries added or overriding its own (agent.yaml's `models:`).
// An entry without input and output prices changes only the limits it sets; a new model without
// prices stays unpriced.
func (t *Table) With(entries map[string]Entry) (*Table, error) {
	out := &Table{prices: maps.Clone(t.prices), limits: maps.Clone(t.limits)}
	for name, e := range entries {
		if (e.Input == nil) != (e.Output == nil) {
			return nil, fmt.Errorf("models.%s: give both input and output prices, or neither", name)
		}
		if e.ContextWindow < 0 || e.MaxOutput < 0 {
			return nil, fmt.Errorf("models.%s: context_window and max_output must be >= 0", name)
		}
		for _, id := range append([]string{name}, e.Aliases...) {
			if e.Input != nil {
				out.prices[id] = price(e)
			}
			l, _ := out.LookupLimits(id)
			if e.ContextWindow > 0 {
				l.ContextWindow = e.ContextWindow
			}
			if e.MaxOutput > 0 {
				l.MaxOutput = e.MaxOutput
			}
			out.limits[id] = l
		}
	}
	return out, nil
}

// LookupLimits finds a model's limits: the exact id, else the id without a dated snapshot suffix.
func (t *Table) LookupLimits(model string) (Limits, bool) {
	if l, ok := t.limits[model]; ok {
		return l, true
	}
	if base := snapshotSuffix.ReplaceAllString(model, ""); base != model {
		l, ok := t.limits[base]
		return l, ok
	}
	return Limits{}, false
}

// ConservativeWindow is the context window assumed for a model the table does not know: small
// enough that compaction starts early rather than the provider refusing a long prompt.
const ConservativeWindow = 32_768

// ModelLimits returns a model's limits from the table in use, and whether the table knows its
// context window.
func ModelLimits(model string) (Limits, bool) {
	l, ok := Default().LookupLimits(model)
	return l, ok && l.ContextWindow > 0
}

// Apply makes the embedded table plus entries (agent.yaml's `models:`) the table every caller of
// Default uses in this process.
func Apply(entries map[string]Entry) error {
	if len(entries) == 0 {
		return nil
	}
	t, err := embedded().With(entries)
	if err != nil {
		return err
	}
	override.Store(t)
	return nil
}

// Dated snapshot suffixes: -20251001 (Anthropic) and -2024-08-06 (OpenAI).
var snapshotSuffix = regexp.MustCompile(`-(\d{8}|\d{4}-\d{2}-\d{2})$`)

// Lookup finds a model's price: the exact id, else the id without a dated snapshot suffix.
func (t *Table) Lookup(model string) (Price, bool) {
	if p, ok := t.prices[model]; ok {
		return p, true
	}
	if base := snapshotSuffix.ReplaceAllString(model, ""); base != model {
		p, ok := t.prices[base]
		return p, ok
	}
	return Price{}, false
}

// Cost prices one usage record. ttl is the cache TTL the writes were made with ("1h" or
// anything else for the 5-minute default). known is false for an unpriced model.
func (t *Table) Cost(model string, u protocol.Usage, ttl string) (usd float64, known bool) {
	p, ok := t.Lookup(model)
	if !ok {
		return 0, false
	}
	write := p.CacheWrite5m
	if ttl == "1h" {
		write = p.CacheWrite1h
	}
	usd = (float64(u.InputTokens)*p.Input +
		float64(u.OutputTokens)*p.Output +
		float64(u.CacheCreationInputTokens)*write +
		float64(u.CacheReadInputTokens)*p.CacheRead) / 1e6
	return usd, true
}

// Cost prices one usage record with the embedded table.
func Cost(model string, u protocol.Usage, ttl string) (usd float64, known bool) {
	return Default().Cost(model, u, ttl)
}

// Accumulator totals model calls into a protocol.UsageReport. It is safe for concurrent use
// (parallel sub-agents and tool calls report into one session's accumulator).
type Accumulator struct {
	table *Table

	mu       sync.Mutex
	total    protocol.Usage
	calls    int
	cost     float64
	byModel  map[string]protocol.Usage
	byRole   map[string]protocol.Usage
	unpriced map[string]bool
}

// NewAccumulator starts an empty total priced with t (nil: the embedded table).
func NewAccumulator(t *Table) *Accumulator {
	if t == nil {
		t = Default()
	}
	return &Accumulator{table: t, byModel: map[string]protocol.Usage{},
		byRole: map[string]protocol.Usage{}, unpriced: map[string]bool{}}
}

// Add records one model call. role is planner, executor, miner or subagent ("" counts as
// executor); ttl is the cache TTL the call used.
func (a *Accumulator) Add(model, role, ttl string, u protocol.Usage) {
	if role == "" {
		role = "executor"
	}
	usd, known := a.table.Cost(model, u, ttl)
	a.mu.Lock()
	defer a.mu.Unlock()
	a.calls++
	a.total = a.total.Add(u)
	a.byModel[model] = a.byModel[model].Add(u)
	a.byRole[role] = a.byRole[role].Add(u)
	if known {
		a.cost += usd
	} else {
		a.unpriced[model] = true
	}
}

// Merge adds a report produced elsewhere (a sub-agent's session) into this total. A report
// with unknown cost makes this total's cost unknown too.
func (a *Accumulator) Merge(r protocol.UsageReport) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.calls += r.Calls
	a.total = a.total.Add(r.Usage)
	for m, u := range r.ByModel {
		a.byModel[m] = a.byModel[m].Add(u)
	}
	for role, u := range r.ByRole {
		a.byRole[role] = a.byRole[role].Add(u)
	}
	if r.CostUSD != nil {
		a.cost += *r.CostUSD
	}
	for _, m := range r.UnpricedModels {
		a.unpriced[m] = true
	}
	if r.CostUSD == nil && len(r.UnpricedModels) == 0 && r.Calls > 0 {
		a.unpriced["(unknown)"] = true
	}
}

// Report returns the totals so far. CostUSD is nil when any model was unpriced, and
// UnpricedModels names them. Steps and WallTimeS are the caller's to fill.
func (a *Accumulator) Report() protocol.UsageReport {
	a.mu.Lock()
	defer a.mu.Unlock()
	r := protocol.UsageReport{Usage: a.total, Calls: a.calls,
		ByModel: make(map[string]protocol.Usage, len(a.byModel)),
		ByRole:  make(map[string]protocol.Usage, len(a.byRole))}
	for k, v := range a.byModel {
		r.ByModel[k] = v
	}
	for k, v := range a.byRole {
		r.ByRole[k] = v
	}
	if len(a.unpriced) == 0 {
		c := a.cost
		r.CostUSD = &c
	} else {
		for m := range a.unpriced {
			r.UnpricedModels = append(r.UnpricedModels, m)
		}
		sort.Strings(r.UnpricedModels)
	}
	return r
}
