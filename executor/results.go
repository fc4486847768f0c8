package executor

import (
	"context"
	"encoding/json"

	"github.com/skein-mesh/skein/pkg/llm"
	"github.com/skein-mesh/skein/pkg/protocol"
)

var readResultDef = llm.ToolDef{
	Name:        protocol.ToolReadResult,
	Description: "Read part of a tool result that was too large to show whole.",
	InputSchema: json.RawMessage(`{"type":"object","properties":{"handle":{"type":"string"},"offset":{"type":"integer","minimum":0},"limit":{"type":"integer","minimum":1}},"required":["handle"],"additionalProperties":false}`),
}

func (r *run) readResult(ctx context.Context, c llm.ToolCall) protocol.ToolReply {
	return protocol.ToolReply{ToolResult: protocol.ToolResult{Kind: protocol.ToolErrUnknown, Error: errNoStore.Error()}}
}
