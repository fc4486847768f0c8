package protocol

import "time"

// The memory model's wire types: entries as memoryd stores and serves them, and the requests and
// replies of the memoryd operations beyond retrieve, ingest and feedback.

// MemoryStatus is the life-cycle state of a memory entry.
type MemoryStatus string

const (
	MemoryActive     MemoryStatus = "active"
	MemorySuperseded MemoryStatus = "superseded"
	MemoryRetired    MemoryStatus = "retired"
	// MemoryQuarantined: the lesson gate held the text back (History says why); it is kept and
	// counted, never retrieved or promoted, until an operator retires or re-imports it.
	MemoryQuarantined MemoryStatus = "quarantined"
)

// Kinds of memory entries. An entry without a kind is a guideline (entries written before kinds
// existed read as guidelines).
const (
	KindGuideline = "guideline" // a short rule mined from a failure or a success
	KindCase      = "case"      // one distilled episode: intent, approach, outcome, insight, quality, cost
	KindSkill     = "skill"     // a named, versioned procedure aggregated from similar successful cases
)

// MemoryEntry is one memory entry as stored and exchanged: a guideline, or (Kind) a case or a
// skill, whose body is in Case or Skill. Text is what is embedded and searched: a guideline's
// rule, a case's task intent, a skill's name and purpose.
type MemoryEntry struct {
	ID    string `msgpack:"id" json:"id" id:"memory"`
	Agent string `msgpack:"agent" json:"agent" id:"agent"`
	// Kind is KindCase or KindSkill ("" and KindGuideline: a guideline).
	Kind     string   `msgpack:"kind,omitempty" json:"kind,omitempty"`
	Text     string   `msgpack:"text" json:"text"`
	Polarity Polarity `msgpack:"polarity" json:"polarity"`
	Tier     Tier     `msgpack:"tier" json:"tier"`
	Tools    []string `msgpack:"tools,omitempty" json:"tools,omitempty"`
	// Sessions are the most recent distinct sessions that gave evidence (at most
	// MaxEvidenceSessions); SessionCount is how many there were in all.
	Sessions     []string  `msgpack:"sessions" json:"sessions" id:"session"`
	SessionCount int       `msgpack:"session_count,omitempty" json:"session_count,omitempty"`
	Hits         int       `msgpack:"hits" json:"hits"`
	Helpful      int       `msgpack:"helpful" json:"helpful"`
	Harmful      int       `msgpack:"harmful" json:"harmful"`
	Model        string    `msgpack:"model" json:"model"` // embedding model id
	Embedding    []float32 `msgpack:"embedding,omitempty" json:"embedding,omitempty"`
	Source       string    `msgpack:"source" json:"source"`
	// SourceAgent and SourceSession say where an entry written from inside a session came
	// from: the sub-agent and its session for source subagent, the session for remembered.
	SourceAgent   string       `msgpack:"source_agent,omitempty" json:"source_agent,omitempty" id:"agent"`
	SourceSession string       `msgpack:"source_session,omitempty" json:"source_session,omitempty" id:"session"`
	Status        MemoryStatus `msgpack:"status" json:"status"`
	SupersededBy  string       `msgpack:"superseded_by,omitempty" json:"superseded_by,omitempty" id:"memory"`
	// Supersedes lists the entries this one replaced, oldest first (at most MaxHistory): with
	// SupersededBy the two ends of every replacement, both entries kept.
	Supersedes []string `msgpack:"supersedes,omitempty" json:"supersedes,omitempty" id:"memory"`
	// Mined records (session, candidate key) pairs already counted, so re-mining is idempotent.
	Mined []string `msgpack:"mined,omitempty" json:"mined,omitempty"`
	// Marks are the feedback of the entry's last sessions (at most MaxMarks): the window over
	// which harmful marks demote a rule and let a rival overturn it.
	Marks []MemoryMark `msgpack:"marks,omitempty" json:"marks,omitempty"`
	// Utility is the echo/fizzle score in [-1, 1]: it rises when the entry was retrieved and
	// followed in a session that succeeded, falls when it was retrieved and ignored or followed
	// into a failure. Echoes and Fizzles count those sessions.
	Utility float64 `msgpack:"utility,omitempty" json:"utility,omitempty"`
	Echoes  int     `msgpack:"echoes,omitempty" json:"echoes,omitempty"`
	Fizzles int     `msgpack:"fizzles,omitempty" json:"fizzles,omitempty"`
	// History is what happened to the entry, oldest first (at most MaxHistory).
	History  []MemoryChange `msgpack:"history,omitempty" json:"history,omitempty"`
	Created  time.Time      `msgpack:"created" json:"created"`
	Updated  time.Time      `msgpack:"updated" json:"updated"`
	LastUsed time.Time      `msgpack:"last_used,omitempty" json:"last_used,omitzero"`
	Revision uint64         `msgpack:"-" json:"-"` // store revision for compare-and-set

	Case  *CaseBody  `msgpack:"case,omitempty" json:"case,omitempty"`
	Skill *SkillBody `msgpack:"skill,omitempty" json:"skill,omitempty"`
}

// KindOf is the entry's kind, KindGuideline for an entry without one.
func (e MemoryEntry) KindOf() string {
	if e.Kind == "" {
		return KindGuideline
	}
	return e.Kind
}

// CaseStep is one step of a case's approach: a tool call (arguments compacted) and how it went,
// consecutive repeats folded into one step.
type CaseStep struct {
	Tool string `msgpack:"tool" json:"tool"`
	Args string `msgpack:"args,omitempty" json:"args,omitempty"`
	OK   bool   `msgpack:"ok" json:"ok"`
	// Error is the failure's own message, for a step that failed.
	Error string `msgpack:"error,omitempty" json:"error,omitempty"`
	// Note says what the step was for, when the extracting model said so.
	Note string `msgpack:"note,omitempty" json:"note,omitempty"`
}

// CaseCost is what the episode cost.
type CaseCost struct {
	InputTokens  int64   `msgpack:"input_tokens,omitempty" json:"input_tokens,omitempty"`
	OutputTokens int64   `msgpack:"output_tokens,omitempty" json:"output_tokens,omitempty"`
	USD          float64 `msgpack:"usd,omitempty" json:"usd,omitempty"`
	Turns        int     `msgpack:"turns,omitempty" json:"turns,omitempty"`
	ToolCalls    int     `msgpack:"tool_calls,omitempty" json:"tool_calls,omitempty"`
	ToolFailures int     `msgpack:"tool_failures,omitempty" json:"tool_failures,omitempty"`
	WallS        float64 `msgpack:"wall_s,omitempty" json:"wall_s,omitempty"`
}

// CaseBody is a case: one episode of a finished session, distilled (see docs/memory.md).
type CaseBody struct {
	// Intent is the task as one self-contained statement (also the entry's Text).
	Intent   string     `msgpack:"intent" json:"intent"`
	Approach []CaseStep `msgpack:"approach" json:"approach"`
	Outcome  Outcome    `msgpack:"outcome" json:"outcome"`
	// Insight is the one thing that made the difference (what failed and what worked instead),
	// Evidence a verbatim quote of the trajectory it rests on.
	Insight  string   `msgpack:"insight,omitempty" json:"insight,omitempty"`
	Evidence string   `msgpack:"evidence,omitempty" json:"evidence,omitempty"`
	Quality  float64  `msgpack:"quality" json:"quality"` // in [0, 1]
	Cost     CaseCost `msgpack:"cost" json:"cost"`
	// Episode is the episode's key within its session (several tasks in one session or
	// conversation are several episodes).
	Episode string `msgpack:"episode,omitempty" json:"episode,omitempty"`
	// Skill is the skill this case supports or weakened ("" none).
	Skill string `msgpack:"skill,omitempty" json:"skill,omitempty" id:"memory"`
	// Extractor says how it was distilled: "model", or "template" (no model, or the model's
	// answer was refused: Refused says why).
	Extractor string `msgpack:"extractor,omitempty" json:"extractor,omitempty"`
	Refused   string `msgpack:"refused,omitempty" json:"refused,omitempty"`
}

// Succeeded reports whether the case's episode ended well.
func (c CaseBody) Succeeded() bool { return c.Outcome.Succeeded() }

// SkillStep is one step of a skill's procedure.
type SkillStep struct {
	Tool string `msgpack:"tool,omitempty" json:"tool,omitempty"`
	Text string `msgpack:"text" json:"text"`
}

// Skill maturities.
const (
	SkillCandidate = "candidate" // formed from enough similar cases, not yet proven
	SkillMature    = "mature"    // enough confirming cases and confidence: shown to the planner and executors
)

// SkillBody is a skill: a procedure aggregated from similar successful cases.
type SkillBody struct {
	Name          string      `msgpack:"name" json:"name"`
	Version       int         `msgpack:"version" json:"version"`
	Preconditions []string    `msgpack:"preconditions,omitempty" json:"preconditions,omitempty"`
	Steps         []SkillStep `msgpack:"steps" json:"steps"`
	// Pitfalls are what went wrong on the way in its cases, and what worked instead.
	Pitfalls []string `msgpack:"pitfalls,omitempty" json:"pitfalls,omitempty"`
	Maturity string   `msgpack:"maturity" json:"maturity"`
	// Confidence is the mean of a Beta belief in the procedure: 1 plus the quality of each
	// confirming case against 1 plus each weakening case (see docs/memory.md).
	Confidence float64 `msgpack:"confidence" json:"confidence"`
	Confirmed  int     `msgpack:"confirmed" json:"confirmed"` // cases that followed it and succeeded
	Weakened   int     `msgpack:"weakened" json:"weakened"`   // cases that followed it and failed
	// Support and Against are the Beta belief's evidence (quality-weighted).
	Support float64 `msgpack:"support" json:"support"`
	Against float64 `msgpack:"against" json:"against"`
	// Cases are the supporting and weakening cases, newest last (at most MaxSkillCases).
	Cases []string `msgpack:"cases" json:"cases" id:"memory"`
	// Signature is the tool sequence the procedure follows, for matching new cases.
	Signature []string `msgpack:"signature" json:"signature"`
	Writer    string   `msgpack:"writer,omitempty" json:"writer,omitempty"` // "model" or "template"
}

// Bounds of cases and skills, so an entry stays a small message.
const (
	MaxCaseSteps      = 12
	MaxCaseStepChars  = 200
	MaxIntentChars    = 300
	MaxInsightChars   = 300
	MaxEvidenceChars  = 300
	MaxSkillSteps     = 8
	MaxSkillPre       = 4
	MaxSkillPitfalls  = 4
	MaxSkillStepChars = 200
	MaxSkillName      = 64
	MaxSkillCases     = 32
	// MaxCasesPerRequest bounds the cases (episodes) one ingest request carries.
	MaxCasesPerRequest = 8
)

// Uses of a retrieved entry in one session, as the miner reads them from the trace.
const (
	UseEcho   = "echo"   // followed, and the session succeeded
	UseFizzle = "fizzle" // ignored, or followed into a failure
)

// MemoryMark is one session's feedback on an entry.
type MemoryMark struct {
	Session string    `msgpack:"session" json:"session"`
	Helpful int       `msgpack:"helpful,omitempty" json:"helpful,omitempty"`
	Harmful int       `msgpack:"harmful,omitempty" json:"harmful,omitempty"`
	Use     string    `msgpack:"use,omitempty" json:"use,omitempty"` // UseEcho, UseFizzle or ""
	At      time.Time `msgpack:"at" json:"at"`
}

// Events of an entry's history.
const (
	ChangePromoted    = "promoted"    // tactical to strategic
	ChangeSuperseded  = "superseded"  // replaced by Other (contradiction lost, duplicate absorbed, refined, reconciled, overturned)
	ChangeSupersedes  = "supersedes"  // replaced Other
	ChangeReinstated  = "reinstated"  // judged again: active again beside Other
	ChangeDemoted     = "demoted"     // strategic to tactical: harmful marks outweighed helpful ones
	ChangeRetired     = "retired"     // out of retrieval for good
	ChangeQuarantined = "quarantined" // the lesson gate held it back
	ChangeReworded    = "reworded"    // the judge reconciled its text with Other's
	// Skills.
	ChangeFormed    = "formed"    // similar cases (Other: the newest) formed the skill
	ChangeConfirmed = "confirmed" // case Other followed it and succeeded
	ChangeWeakened  = "weakened"  // case Other followed it and failed
	ChangeUpdated   = "updated"   // its procedure changed (a new version) after case Other
)

// MemoryChange is one event of an entry's life: what, when, the other entry involved, and why.
type MemoryChange struct {
	At     time.Time `msgpack:"at" json:"at"`
	Event  string    `msgpack:"event" json:"event"`
	Other  string    `msgpack:"other,omitempty" json:"other,omitempty"`
	Reason string    `msgpack:"reason,omitempty" json:"reason,omitempty"`
}

// Bounds of an entry's evidence lists, so an entry stays a small message however many sessions
// it learns from.
const (
	MaxEvidenceSessions = 32
	MaxEvidenceMarkers  = 256
	MaxMarks            = 64
	MaxHistory          = 32
)

// DistinctSessions is how many distinct sessions gave the entry evidence.
func (e MemoryEntry) DistinctSessions() int { return max(e.SessionCount, len(e.Sessions)) }

// MemoryEviction is one entry removed (or, in a dry run, that would be).
type MemoryEviction struct {
	ID      string       `msgpack:"id" json:"id" id:"memory"`
	Agent   string       `msgpack:"agent" json:"agent" id:"agent"`
	Kind    string       `msgpack:"kind,omitempty" json:"kind,omitempty"`
	Tier    Tier         `msgpack:"tier" json:"tier"`
	Status  MemoryStatus `msgpack:"status" json:"status"`
	Text    string       `msgpack:"text" json:"text"`
	Helpful int          `msgpack:"helpful" json:"helpful"`
	Harmful int          `msgpack:"harmful" json:"harmful"`
	LastAt  time.Time    `msgpack:"last_at" json:"last_at"`
	Reason  string       `msgpack:"reason" json:"reason"`
	Pol     Polarity     `msgpack:"polarity" json:"polarity"`
}

// MemoryInspectRequest asks for counts per tier and the entries nearest a query.
type MemoryInspectRequest struct {
	Header
	Agent string `msgpack:"agent,omitempty" json:"agent,omitempty" id:"agent"`
	// Kind narrows the hits to one kind ("": every kind).
	Kind  string `msgpack:"kind,omitempty" json:"kind,omitempty"`
	Query string `msgpack:"query,omitempty" json:"query,omitempty"`
	TopK  int    `msgpack:"top_k,omitempty" json:"top_k,omitempty"`
	Tier  Tier   `msgpack:"tier,omitempty" json:"tier,omitempty"`
}

// MemoryCount is the number of entries of one agent in one tier and status.
type MemoryCount struct {
	Agent  string       `msgpack:"agent" json:"agent" id:"agent"`
	Kind   string       `msgpack:"kind,omitempty" json:"kind,omitempty"` // "" is a guideline
	Tier   Tier         `msgpack:"tier" json:"tier"`
	Status MemoryStatus `msgpack:"status" json:"status"`
	N      int          `msgpack:"n" json:"n"`
}

// MemoryScored is an entry with its score for a query (embedding stripped). Score is the rank
// retrieval orders by (similarity nudged by helpful/harmful marks), Similarity the cosine
// similarity alone, Why how retrieval would treat the entry for this query.
type MemoryScored struct {
	Entry      MemoryEntry `msgpack:"entry" json:"entry"`
	Score      float64     `msgpack:"score" json:"score"`
	Similarity float64     `msgpack:"similarity,omitempty" json:"similarity,omitempty"`
	Why        string      `msgpack:"why,omitempty" json:"why,omitempty"`
}

// MemoryInspectReply answers MemoryInspectRequest.
type MemoryInspectReply struct {
	Header
	Counts []MemoryCount  `msgpack:"counts" json:"counts"`
	Hits   []MemoryScored `msgpack:"hits,omitempty" json:"hits,omitempty"`
	Model  string         `msgpack:"model" json:"model"`
	At     time.Time      `msgpack:"at" json:"at"`
	Fault
}

// MemoryListRequest pages through entries (status "" means active, "*" every status).
type MemoryListRequest struct {
	Header
	Agent string `msgpack:"agent,omitempty" json:"agent,omitempty" id:"agent"`
	// Kind is KindGuideline, KindCase, KindSkill or "*" for every kind ("": guidelines, as
	// before kinds existed).
	Kind   string       `msgpack:"kind,omitempty" json:"kind,omitempty"`
	Tier   Tier         `msgpack:"tier,omitempty" json:"tier,omitempty"`
	Status MemoryStatus `msgpack:"status,omitempty" json:"status,omitempty"`
	Offset int          `msgpack:"offset,omitempty" json:"offset,omitempty"`
	Limit  int          `msgpack:"limit,omitempty" json:"limit,omitempty"`
}

// MemoryListReply is one page, ordered by agent, tier (strategic first) and id; embeddings stripped.
type MemoryListReply struct {
	Header
	Entries []MemoryEntry `msgpack:"entries" json:"entries"`
	Total   int           `msgpack:"total" json:"total"`
	Fault
}

// MemoryGetRequest asks for one entry.
type MemoryGetRequest struct {
	Header
	ID string `msgpack:"id" json:"id" id:"memory"`
}

// MemoryGetReply carries the entry (embedding stripped), or Error.
type MemoryGetReply struct {
	Header
	Entry *MemoryEntry `msgpack:"entry,omitempty" json:"entry,omitempty"`
	Fault
}

// MemoryImportRequest writes entries (from `skein memory export`, or hand-written). Each is re-embedded
// with memoryd's model. An existing id is skipped unless Replace.
type MemoryImportRequest struct {
	Header
	Entries []MemoryEntry `msgpack:"entries" json:"entries"`
	Replace bool          `msgpack:"replace,omitempty" json:"replace,omitempty"`
}

// MemoryImportReply counts what happened.
type MemoryImportReply struct {
	Header
	Imported int      `msgpack:"imported" json:"imported"`
	Skipped  int      `msgpack:"skipped" json:"skipped"`
	Problems []string `msgpack:"problems,omitempty" json:"problems,omitempty"`
	Fault
}

// MemoryEvictRequest runs the capacity policy now (agent "" = every agent).
type MemoryEvictRequest struct {
	Header
	Agent  string `msgpack:"agent,omitempty" json:"agent,omitempty" id:"agent"`
	DryRun bool   `msgpack:"dry_run,omitempty" json:"dry_run,omitempty"`
}

// MemoryEvictReply lists the entries removed, or that would be.
type MemoryEvictReply struct {
	Header
	Evicted  []MemoryEviction `msgpack:"evicted" json:"evicted"`
	DryRun   bool             `msgpack:"dry_run" json:"dry_run"`
	Capacity int              `msgpack:"capacity" json:"capacity"`
	Fault
}

// MemoryRetireRequest takes one entry out of retrieval: retired (kept with its evidence, listed,
// never retrieved again) or, with Evict, deleted from the store.
type MemoryRetireRequest struct {
	Header
	ID     string `msgpack:"id" json:"id" id:"memory"`
	Evict  bool   `msgpack:"evict,omitempty" json:"evict,omitempty"`
	Reason string `msgpack:"reason,omitempty" json:"reason,omitempty"`
	By     string `msgpack:"by,omitempty" json:"by,omitempty"` // who asked, for memoryd's log
}

// MemoryRetireReply says what became of the entry: Status retired, or Evicted.
type MemoryRetireReply struct {
	Header
	ID      string       `msgpack:"id" json:"id" id:"memory"`
	Status  MemoryStatus `msgpack:"status,omitempty" json:"status,omitempty"`
	Evicted bool         `msgpack:"evicted" json:"evicted"`
	Fault
}

// MemoryMigrateRequest re-embeds every entry with memoryd's current model.
type MemoryMigrateRequest struct {
	Header
}

// MemoryMigrateReply reports the migration.
type MemoryMigrateReply struct {
	Header
	Reembedded int    `msgpack:"reembedded" json:"reembedded"`
	From       string `msgpack:"from" json:"from"`
	Model      string `msgpack:"model" json:"model"`
	Fault
}

// MemoryRepairRequest asks memoryd to make its store's search index hold exactly the store's
// records (memory.store milvus: the records in the mesh's bucket, the rows in Milvus).
type MemoryRepairRequest struct {
	Header
}

// MemoryRepairReply says what the repair found: the records and rows there were, the records
// without a row (indexed now), the rows of an older revision (rewritten), the rows without a
// record (deleted). Repaired is false for a store with nothing to repair (kv: its index is
// rebuilt from the bucket on every start).
type MemoryRepairReply struct {
	Header
	Store    string `msgpack:"store" json:"store"`
	Repaired bool   `msgpack:"repaired" json:"repaired"`
	Records  int    `msgpack:"records" json:"records"`
	Rows     int    `msgpack:"rows" json:"rows"`
	Missing  int    `msgpack:"missing" json:"missing"`
	Stale    int    `msgpack:"stale" json:"stale"`
	Orphans  int    `msgpack:"orphans" json:"orphans"`
	Fault
}

// MemoryHealthRequest asks whether memoryd is serving.
type MemoryHealthRequest struct {
	Header
}

// MemoryHealthReply describes the store and model. OK is false while a migration is needed.
type MemoryHealthReply struct {
	Header
	OK      bool   `msgpack:"ok" json:"ok"`
	Store   string `msgpack:"store" json:"store"`
	Model   string `msgpack:"model" json:"model"`
	Dim     int    `msgpack:"dim" json:"dim"`
	Entries int    `msgpack:"entries" json:"entries"`
	// Fault says why OK is false (code unavailable while the store needs a migration).
	Fault
	// Storage is the mesh's store as memoryd sees it (StorageReply.State): while it is not ok,
	// learning (ingest, remember) fails or waits; retrieval goes on. Empty when nobody reports it.
	Storage StorageState `msgpack:"storage,omitempty" json:"storage,omitempty"`
}

// MemoryEmbedRequest asks for vectors of texts with memoryd's model.
type MemoryEmbedRequest struct {
	Header
	Texts []string `msgpack:"texts" json:"texts"`
}

// MemoryEmbedReply carries one vector per text.
type MemoryEmbedReply struct {
	Header
	Vectors [][]float32 `msgpack:"vectors" json:"vectors"`
	Model   string      `msgpack:"model" json:"model"`
	Fault
}

// Sources of memory entries: who wrote them.
const (
	SourceMiner      = "miner"      // mined from a trace
	SourceSubagent   = "subagent"   // a sub-agent's finding, shared with its parent
	SourceHuman      = "human"      // imported (skein memory import)
	SourceRemembered = "remembered" // the agent's own remember call
)

// Bounds of one RememberRequest.
const (
	MaxRememberNotes = 16
	MaxNoteKey       = 128
)

// RememberNote is one note to store; Key identifies it within its session (a repeat of the same
// key from the same session is counted once).
type RememberNote struct {
	Text string `msgpack:"text" json:"text"`
	Key  string `msgpack:"key" json:"key"`
}

// RememberRequest stores notes in Agent's memory as tactical entries with SessionID as their
// evidence, under the same redaction and length caps as mined guidelines. Source is remembered
// (the agent's own remember call) or subagent (SourceAgent's findings, shared with its parent;
// SessionID is then the sub-agent's session).
type RememberRequest struct {
	Header
	Agent       string         `msgpack:"agent" json:"agent" id:"agent"`
	SessionID   string         `msgpack:"session_id" json:"session_id" id:"session"`
	Source      string         `msgpack:"source" json:"source"`
	SourceAgent string         `msgpack:"source_agent,omitempty" json:"source_agent,omitempty" id:"agent"`
	Notes       []RememberNote `msgpack:"notes" json:"notes"`
}

// RememberReply says what happened to each note (IngestAction per note, in order).
type RememberReply struct {
	Header
	Actions []IngestAction `msgpack:"actions" json:"actions"`
	Fault
}
