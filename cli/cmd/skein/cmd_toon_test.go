package main

import (
	"bytes"
	"strings"
	"testing"
)

func runToon(t *testing.T, stdin string, args ...string) (string, error) {
	t.Helper()
	cmd := newToonCmd()
	var out bytes.Buffer
	cmd.SetIn(strings.NewReader(stdin))
	cmd.SetOut(&out)
	cmd.SetErr(&bytes.Buffer{})
	cmd.SetArgs(args)
	cmd.SilenceUsage = true
	cmd.SilenceErrors = true
	err := cmd.Execute()
	return out.String(), err
}

func TestToonEncodeDecodeCommands(t *testing.T) {
	out, err := runToon(t, `{"rows":[{"a":1,"b":"x y"},{"a":2,"b":"z"}]}`, "encode", "--delimiter", "tab", "--indent", "4")
	if err != nil {
		t.Fatal(err)
	}
	if want := "rows[2\t]{a\tb}:\n    1\tx y\n    2\tz\n"; out != want {
		t.Fatalf("encode: got %q want %q", out, want)
	}
	back, err := runToon(t, out, "decode", "--indent", "4")
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"rows":[{"a":1,"b":"x y"},{"a":2,"b":"z"}]}` + "\n"; back != want {
		t.Fatalf("decode: got %q", back)
	}
}

func TestToonDecodeStrictness(t *testing.T) {
	_, err := runToon(t, "a: 1\nb[3]: x,y\n", "decode")
	if err == nil || !strings.Contains(err.Error(), "line 2, column") {
		t.Fatalf("strict decode must fail naming line and column, got %v", err)
	}
	for _, flag := range []string{"--no-strict", "--strict=false"} {
		out, err := runToon(t, "a: 1\nb[3]: x,y\n", "decode", flag)
		if err != nil || out != `{"a":1,"b":["x","y"]}`+"\n" {
			t.Fatalf("%s: %q, %v", flag, out, err)
		}
	}
	if _, err := runToon(t, "{", "encode"); err == nil || !strings.Contains(err.Error(), "line 1, column") {
		t.Fatalf("bad JSON must name line and column, got %v", err)
	}
	if _, err := runToon(t, "{}", "encode", "--delimiter", ";"); err == nil {
		t.Fatal("unknown delimiter accepted")
	}
}
