package protocol

import "time"

// StorageState is how the mesh's JetStream storage stands, as the process that runs the embedded
// server sees it (embedded.StorageWatch).
type StorageState string

const (
	// StorageOK: JetStream writes, and the disk has more free space than the reserve.
	StorageOK StorageState = "ok"
	// StorageLow: the disk's free space is under the reserve (mesh.storage_reserve). New sessions
	// are refused (storage_full) so the work already accepted has the reserve to finish in.
	StorageLow StorageState = "low"
	// StorageFull: JetStream cannot write (a stream's store failed, or JetStream stopped). Work in
	// flight waits, held by its worker, until space comes back; nothing is dropped.
	StorageFull StorageState = "full"
)

// Accepting reports whether new sessions may be accepted in this state. The zero value (nobody
// reported a state) accepts: a mesh whose server is not embedded learns of a full store from
// the server's own errors.
func (s StorageState) Accepting() bool { return s == "" || s == StorageOK }

// StorageRequest asks the mesh whether JetStream can write.
type StorageRequest struct {
	Header
}

// StorageReply is the state of the mesh's storage.
type StorageReply struct {
	Header
	State StorageState `msgpack:"state" json:"state"`
	// Reason says, when State is not ok, what is wrong and what the operator can do.
	Reason string `msgpack:"reason,omitempty" json:"reason,omitempty"`
	// FreeBytes is the free space of the filesystem under the JetStream store; ReserveBytes the
	// free space below which new sessions are refused.
	FreeBytes    int64 `msgpack:"free_bytes" json:"free_bytes"`
	ReserveBytes int64 `msgpack:"reserve_bytes" json:"reserve_bytes"`
	// Streams are the streams (and buckets' streams) whose store failed to write.
	Streams []string `msgpack:"streams,omitempty" json:"streams,omitempty"`
	// Since is when State began.
	Since time.Time `msgpack:"since" json:"since"`
	// Restarts counts the times JetStream was restarted in place to clear write errors once
	// space came back.
	Restarts int `msgpack:"restarts" json:"restarts"`
	// Fault is set when the request itself is refused (an unreadable one); a store that is low
	// or full is a State, not an error.
	Fault
}

// Idempotent: asking twice is harmless.
func (r *StorageRequest) Idempotent() bool { return true }
