// Package usage prices model calls and totals them per session.
//
// Prices live in one file, prices.yaml, compiled in with go:embed. Cost is computed the way
// the providers bill: fresh input, output, cache writes (by TTL) and cache reads each at their
// own price. An unpriced model is "unknown", never free.
package usage

import (
	_ "embed"
	"fmt"
	"regexp"
	"sort"
	"strings"
	"sync"

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

type priceEntry struct {
	Input        *float64 `yaml:"input"`
	Output       *float64 `yaml:"output"`
	CacheRead    *float64 `yaml:"cache_read"`
	CacheWrite5m *float64 `yaml:"cache_write_5m"`
	CacheWrite1h *float64 `yaml:"cache_write_1h"`
	Aliases      []string `yaml:"aliases"`
}

// Table maps model ids to prices.
type Table struct {
	prices map[string]Price
}

var (
	defaultOnce  sync.Once
	defaultTable *Table
)

// Default returns the table from the embedded prices.yaml.
func Default() *Table {
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
	t := &Table{prices: map[string]Price{}}
	for name, e := range doc.Models {
		if e.Input == nil || e.Output == nil {
			return nil, fmt.Errorf("price table: model %q: input and output are required", name)
		}
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
		for _, id := range append([]string{name}, e.Aliases...) {
			if _, dup := t.prices[id]; dup {
				return nil, fmt.Errorf("price table: model %q listed twice", id)
			}
			t.prices[id] = p
		}
	}
	return t, nil
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
