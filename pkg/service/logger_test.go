package service

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"testing"
)

func TestLogLinesCarryNoCredentials(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{ReplaceAttr: redactAttr}))
	log.Info("started", "nats", "nats://svc:natspw-12345@10.0.0.2:4222",
		"err", errors.New("401 from provider: key sk-ant-api03-LOGGEDKEY01234"),
		"urls", []string{"nats://a:pw-in-list-99@h:1"})
	out := buf.String()
	for _, secret := range []string{"natspw-12345", "LOGGEDKEY", "pw-in-list-99"} {
		if strings.Contains(out, secret) {
			t.Errorf("%q in log line: %s", secret, out)
		}
	}
	if !strings.Contains(out, "nats://svc:[REDACTED]@10.0.0.2:4222") || !strings.Contains(out, "401 from provider") {
		t.Errorf("log line lost its content: %s", out)
	}
}
