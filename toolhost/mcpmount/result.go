package mcpmount

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/skein-mesh/skein/pkg/protocol"
)

// maxErrorLen bounds the error text of a result, as a subprocess tool's.
const maxErrorLen = 2 << 10

// result maps a server's answer onto skein's result shape:
//   - isError: ok false, kind tool_error, the text content as the error, structured content (if
//     any) as the result;
//   - structured content: the result as it is;
//   - one text block: the text, or the JSON value it holds (so TOON renders a table, not a
//     quoted string);
//   - anything else: a list with a string per text block and a small object per other block
//     (images and audio as their type, MIME type and size: their bytes are not for the model's
//     transcript).
//
// A result whose JSON is over maxOutput bytes is refused as output_too_large.
func result(res *mcp.CallToolResult, maxOutput int) protocol.ToolResult {
	var body json.RawMessage
	var err error
	switch {
	case res.StructuredContent != nil:
		body, err = json.Marshal(res.StructuredContent)
	case len(res.Content) == 1 && isText(res.Content[0]):
		body = textValue(res.Content[0].(*mcp.TextContent).Text)
	default:
		items := make([]any, 0, len(res.Content))
		for _, c := range res.Content {
			items = append(items, contentItem(c))
		}
		body, err = json.Marshal(items)
	}
	if err != nil {
		return protocol.ToolResult{Kind: protocol.ToolErrMalformed, Error: "the server's result cannot be written as JSON: " + err.Error()}
	}
	if len(body) > maxOutput {
		return protocol.ToolResult{Kind: protocol.ToolErrTooLarge, Truncated: true,
			Error: fmt.Sprintf("the server's result is %d bytes, over the %d-byte cap (max_output_bytes); ask for less", len(body), maxOutput)}
	}
	if res.IsError {
		out := protocol.ToolResult{Kind: protocol.ToolErrToolError, Error: clip(strings.TrimSpace(texts(res.Content)), maxErrorLen)}
		if out.Error == "" {
			out.Error = "the server reported an error without saying what"
		}
		if res.StructuredContent != nil {
			out.Result = body
		}
		return out
	}
	return protocol.ToolResult{OK: true, Result: body}
}

func isText(c mcp.Content) bool {
	_, ok := c.(*mcp.TextContent)
	return ok
}

// textValue is text as a JSON value: the object or array it holds, else the string.
func textValue(text string) json.RawMessage {
	t := bytes.TrimSpace([]byte(text))
	if len(t) > 0 && (t[0] == '{' || t[0] == '[') && json.Valid(t) {
		var buf bytes.Buffer
		if json.Compact(&buf, t) == nil {
			return buf.Bytes()
		}
	}
	b, _ := json.Marshal(text)
	return b
}

func texts(cs []mcp.Content) string {
	var parts []string
	for _, c := range cs {
		if t, ok := c.(*mcp.TextContent); ok {
			parts = append(parts, t.Text)
		}
	}
	return strings.Join(parts, "\n")
}

// contentItem is one content block as the model sees it in a list.
func contentItem(c mcp.Content) any {
	type media struct {
		Type     string `json:"type"`
		MIMEType string `json:"mime_type,omitempty"`
		Bytes    int    `json:"bytes"`
	}
	type resource struct {
		Type        string `json:"type"`
		URI         string `json:"uri"`
		Name        string `json:"name,omitempty"`
		Description string `json:"description,omitempty"`
		MIMEType    string `json:"mime_type,omitempty"`
		Text        string `json:"text,omitempty"`
		Bytes       int    `json:"bytes,omitempty"`
	}
	switch c := c.(type) {
	case *mcp.TextContent:
		return c.Text
	case *mcp.ImageContent:
		return media{Type: "image", MIMEType: c.MIMEType, Bytes: len(c.Data)}
	case *mcp.AudioContent:
		return media{Type: "audio", MIMEType: c.MIMEType, Bytes: len(c.Data)}
	case *mcp.ResourceLink:
		return resource{Type: "resource_link", URI: c.URI, Name: c.Name, Description: c.Description, MIMEType: c.MIMEType}
	case *mcp.EmbeddedResource:
		if c.Resource == nil {
			return resource{Type: "resource"}
		}
		return resource{Type: "resource", URI: c.Resource.URI, MIMEType: c.Resource.MIMEType, Text: c.Resource.Text, Bytes: len(c.Resource.Blob)}
	}
	return map[string]string{"type": fmt.Sprintf("%T", c)}
}

// rpcFailure maps a JSON-RPC error answer (not a tool's own isError result) onto a result.
func rpcFailure(server, remote string, err error) (protocol.ToolResult, bool) {
	var werr *jsonrpc.Error
	if !errors.As(err, &werr) {
		return protocol.ToolResult{}, false
	}
	msg := clip(fmt.Sprintf("the %s MCP server refused the call of %s: %s", server, remote, werr.Message), maxErrorLen)
	switch werr.Code {
	case jsonrpc.CodeInvalidParams:
		return protocol.ToolResult{Kind: protocol.ToolErrBadArgs, Error: msg}, true
	case jsonrpc.CodeMethodNotFound:
		return protocol.ToolResult{Kind: protocol.ToolErrUnknown, Error: msg}, true
	}
	return protocol.ToolResult{Kind: protocol.ToolErrToolError, Error: msg}, true
}
