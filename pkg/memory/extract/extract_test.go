package extract_test

import (
	"testing"

	"github.com/skein-mesh/skein/pkg/memory/extract"
	"github.com/skein-mesh/skein/pkg/protocol"
)

func TestDecodeIsStrict(t *testing.T) {
	var v struct {
		A string `json:"a"`
	}
	if err := extract.Decode("```json\n{\"a\": \"x\"}\n```", &v); err != nil || v.A != "x" {
		t.Fatalf("fenced object: %v %+v", err, v)
	}
	for _, bad := range []string{`{"a": "x"} and more`, `{"a": "x", "b": 1}`, `sure! {"a": "x"}`, `{"a": `, ``} {
		if r := extract.Refused(extract.Decode(bad, &v)); r == nil || r.Code != extract.RefusedJSON {
			t.Errorf("Decode(%q): %v, want %s", bad, r, extract.RefusedJSON)
		}
	}
}

func TestQuoteIsVerbatim(t *testing.T) {
	tr := extract.Trajectory{Outcome: protocol.OutcomeSuccess, Turns: []extract.Turn{{Task: "Convert the file",
		Calls: []extract.Call{{Tool: "convert", Args: `{"to":"pdf"}`, Error: "unsupported   format:\n  docx"}}}}}
	if err := extract.Quote("evidence", "unsupported format: docx", tr); err != nil {
		t.Errorf("a quote differing only in whitespace was refused: %v", err)
	}
	for _, q := range []string{"unsupported file format", "Unsupported format: docx", "format: pdf"} {
		if r := extract.Refused(extract.Quote("evidence", q, tr)); r == nil || r.Code != extract.RefusedQuote {
			t.Errorf("Quote(%q): %v, want %s", q, r, extract.RefusedQuote)
		}
	}
	if err := extract.Tools("approach", []string{"convert"}, tr.Called()); err != nil {
		t.Error(err)
	}
	if r := extract.Refused(extract.Tools("approach", []string{"upload"}, tr.Called())); r == nil || r.Code != extract.RefusedTool {
		t.Errorf("an uncalled tool passed: %v", r)
	}
}
