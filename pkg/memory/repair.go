package memory

import (
	"context"
	"fmt"
)

// Repairer is a Store whose search index lives apart from its records (the Milvus store: records
// in the mesh's bucket, rows in a collection) and can be brought back to them.
type Repairer interface {
	Store
	// Repair makes the index hold exactly the records and reports what it found.
	Repair(ctx context.Context) (RepairReport, error)
}

// RepairReport is what a Repair found: how many records and rows there were, and what it changed.
type RepairReport struct {
	Records int `json:"records"`
	Rows    int `json:"rows"`
	// Missing records had no row (indexed now); Stale rows were of an older revision than their
	// record (rewritten); Orphans were rows without a record (deleted).
	Missing int `json:"missing"`
	Stale   int `json:"stale"`
	Orphans int `json:"orphans"`
}

// Changed is how many rows the repair wrote or deleted.
func (r RepairReport) Changed() int { return r.Missing + r.Stale + r.Orphans }

// String says in one line what was found.
func (r RepairReport) String() string {
	if r.Changed() == 0 {
		return fmt.Sprintf("%d records, %d rows: in step", r.Records, r.Rows)
	}
	return fmt.Sprintf("%d records, %d rows: %d record(s) without a row indexed, %d stale row(s) rewritten, %d row(s) without a record deleted",
		r.Records, r.Rows, r.Missing, r.Stale, r.Orphans)
}
