package protocol

import (
	"encoding/base64"
	"reflect"
	"strings"
	"testing"

	"github.com/skein-mesh/skein/pkg/devenv/devtest"
)

func TestIdentifierKindsRefuseWhatNoSubjectCanHold(t *testing.T) {
	cases := []struct {
		kind ID
		s    string
		want Code // "" accepted
	}{
		{IDSession, "s-1f3a", ""},
		{IDSession, strings.Repeat("a", MaxSessionID), ""},
		{IDSession, strings.Repeat("a", MaxSessionID+1), CodeTooLarge},
		{IDSession, strings.Repeat("a", 5000), CodeTooLarge},
		{IDSession, "", CodeBadRequest},
		{IDSession, "a.b", CodeBadRequest},
		{IDSession, "a*", CodeBadRequest},
		{IDSession, "a>", CodeBadRequest},
		{IDSession, "a b", CodeBadRequest},
		{IDSession, "é", CodeBadRequest},
		{IDAgent, strings.Repeat("x", MaxAgentName+1), CodeTooLarge},
		{IDTool, "fs__read_file", ""},
		{IDStep, strings.Repeat("s", MaxStepID+1), CodeTooLarge},
		{IDCall, "s-1.step-1.t2.c0", ""},
		{IDCall, ".s", CodeBadRequest},
		{IDCall, "s.", CodeBadRequest},
		{IDCall, "s..t", CodeBadRequest},
		{IDCall, "s.*", CodeBadRequest},
		{IDMemory, "0123456789abcdef01234567", ""},
		{IDMemory, "a=b", CodeBadRequest},
		{IDTurn, "t-0123456789abcdef0123", ""},
		{IDTurn, strings.Repeat("t", MaxTurnID+1), CodeTooLarge},
		{IDTurn, "t 1", CodeBadRequest},
	}
	for _, c := range cases {
		err := c.kind.Check(c.s)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s %.20q: refused: %v", c.kind.Name, c.s, err)
		case c.want != "" && CodeOf(err) != c.want:
			t.Errorf("%s %.20q: error %v (code %s), want code %s", c.kind.Name, c.s, err, CodeOf(err), c.want)
		}
		if err != nil && len(err.Error()) > 200 {
			t.Errorf("%s: the error repeats the long id (%d bytes)", c.kind.Name, len(err.Error()))
		}
	}
}

// Every subject, key and object a role builds from identifiers of the longest length, in the
// longest namespace, stays within MaxSubject, and a line with the longest subject, a reply inbox
// and two byte counts stays within the server's max_control_line (the arithmetic in ids.go).
func TestLongestSubject(t *testing.T) {
	n := NewNames(strings.Repeat("n", MaxNamespace))
	long := func(k ID) string {
		if !k.Dotted {
			return strings.Repeat("x", k.Max)
		}
		return strings.Repeat("x", k.Max/2) + "." + strings.Repeat("x", k.Max-k.Max/2-1)
	}
	session, agent, tool, step, call := long(IDSession), long(IDAgent), long(IDTool), long(IDStep), long(IDCall)
	if !IDCall.Valid(ToolCallID(session, step, 999999999, 999999999)) {
		t.Fatalf("the call id of the longest session and step is not a valid call id")
	}
	consumer := strings.Repeat("c", 80) // ExecutorConsumer(agent), or an ordered consumer's name
	if len(n.ExecutorConsumer(agent)) > len(consumer) {
		t.Fatalf("executor consumer name %d bytes, the arithmetic allows %d", len(n.ExecutorConsumer(agent)), len(consumer))
	}
	kvKey := func(bucket, key string) []string {
		b := n.Bucket(bucket)
		subj := KVKey(b, key)
		return []string{subj,
			"$JS.API.DIRECT.GET.KV_" + b + "." + subj,
			"$JS.API.CONSUMER.CREATE.KV_" + b + "." + consumer + "." + subj}
	}
	streamSubject := func(stream, subj string) []string {
		return []string{subj, "$JS.API.CONSUMER.CREATE." + n.Stream(stream) + "." + consumer + "." + subj,
			"$JS.API.DIRECT.GET." + n.Stream(stream) + "." + subj}
	}
	object := func(name string) []string {
		b := n.Bucket(ObjectPayloads)
		meta := "$O." + b + ".M." + base64.URLEncoding.EncodeToString([]byte(name))
		return []string{meta, "$JS.API.DIRECT.GET.OBJ_" + b + "." + meta}
	}
	var all []string
	for _, group := range [][]string{
		{n.Submit(), n.Cancel(), n.CancelNotice(session), n.Delta(session), n.Tool(tool), n.Memory(MemRemember), n.DLQ(StreamResults)},
		streamSubject(StreamTasks, n.Task(agent)), streamSubject(StreamWork, n.Work(agent)),
		streamSubject(StreamResults, n.Result(session)), streamSubject(StreamTrace, n.Trace(session)),
		streamSubject(StreamUsage, n.Usage(agent)),
		kvKey(BucketSessions, session), kvKey(BucketLedger, session), kvKey(BucketAgents, agent), kvKey(BucketTools, tool),
		kvKey(BucketToolCalls, call), kvKey(BucketSteps, session+"."+step), kvKey(BucketMemory, long(IDMemory)),
		object(TranscriptObject(session)),
	} {
		all = append(all, group...)
	}
	longest := ""
	for _, s := range all {
		if len(s) > len(longest) {
			longest = s
		}
	}
	if len(longest) > MaxSubject {
		t.Errorf("subject of %d bytes, over MaxSubject %d: %s", len(longest), MaxSubject, longest)
	}
	const replyInbox, counts = 128, 1 + 10 + 1 + 10
	if line := MaxSubject + 1 + replyInbox + counts; line*6 > MaxControlLine {
		t.Errorf("the longest line is %d bytes; the arithmetic in ids.go promises under a sixth of %d", line, MaxControlLine)
	}
	t.Logf("longest subject %d bytes: %s", len(longest), longest)
}

func TestCheckIDsFindsIdentifiersInNestedFieldsAndLists(t *testing.T) {
	ok := &FeedbackRequest{Agent: "a", SessionID: "s-1", Helpful: []string{"e1", "e2"}}
	if err := CheckIDs(ok); err != nil {
		t.Fatal(err)
	}
	bad := &FeedbackRequest{Agent: "a", SessionID: "s-1", Helpful: []string{"e1", strings.Repeat("e", 5000)}}
	err := CheckIDs(bad)
	if CodeOf(err) != CodeTooLarge || !strings.Contains(err.Error(), "helpful[1]") {
		t.Fatalf("CheckIDs = %v, want too_large naming helpful[1]", err)
	}
	nested := &Session{SessionID: "s-1", Plan: []PlanStep{{StepID: "s1"}, {StepID: "s2", DependsOn: []string{"s1", "a.b"}}}}
	if err := CheckIDs(nested); CodeOf(err) != CodeBadRequest || !strings.Contains(err.Error(), "plan[1].depends_on[1]") {
		t.Fatalf("CheckIDs = %v, want bad_request naming plan[1].depends_on[1]", err)
	}
	imp := &MemoryImportRequest{Entries: []MemoryEntry{{ID: "ok"}, {ID: "x", SupersededBy: strings.Repeat("m", MaxMemoryID+1)}}}
	if err := CheckIDs(imp); CodeOf(err) != CodeTooLarge || !strings.Contains(err.Error(), "entries[1].superseded_by") {
		t.Fatalf("CheckIDs = %v, want too_large naming entries[1].superseded_by", err)
	}
	if err := CheckIDs(&SubmitRequest{Task: "hi"}); err != nil {
		t.Fatalf("empty identifiers are the handler's business: %v", err)
	}
}

// A field that names a session, a step, a call or a parent carries its kind, so a message added
// later cannot leave an identifier unchecked at the doors and unbounded in the documents.
func TestIdentifierFieldsCarryTheirKind(t *testing.T) {
	mustTag := map[string]bool{"SessionID": true, "StepID": true, "CallID": true, "Parent": true, "Root": true,
		"Previous": true, "Conversation": true, "EntryID": true, "SourceSession": true, "SourceAgent": true, "SupersededBy": true}
	checked := 0
	for typ, fl := range devtest.StructFields(t, ".") {
		for _, name := range fl.Names {
			if !mustTag[name.Name] {
				continue
			}
			checked++
			tag := ""
			if fl.Tag != nil {
				tag = reflect.StructTag(strings.Trim(fl.Tag.Value, "`")).Get("id")
			}
			if _, ok := IDOfKind(tag); !ok {
				t.Errorf("%s.%s has no id kind (`id:\"...\"`)", typ, name.Name)
			}
		}
	}
	if checked < 20 {
		t.Fatalf("checked %d fields; the scan is broken", checked)
	}
}
