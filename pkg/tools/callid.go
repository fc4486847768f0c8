package tools

import (
	"context"
	"encoding/json"
)

type callIDKey struct{}

// WithCallID makes Run pass id to the tool: in the environment variable protocol.EnvCallID and,
// when the manifest sets call_id_arg, as that field of the arguments.
func WithCallID(ctx context.Context, id string) context.Context {
	return context.WithValue(ctx, callIDKey{}, id)
}

// CallIDFrom returns the call id WithCallID put in ctx ("" when none).
func CallIDFrom(ctx context.Context) string {
	id, _ := ctx.Value(callIDKey{}).(string)
	return id
}

// withCallIDArg sets field name of a JSON object to id. Arguments that are not an object are
// left alone (the schema check has already accepted them).
func withCallIDArg(args json.RawMessage, name, id string) json.RawMessage {
	var obj map[string]json.RawMessage
	if json.Unmarshal(args, &obj) != nil || obj == nil {
		return args
	}
	v, _ := json.Marshal(id)
	obj[name] = v
	out, err := json.Marshal(obj)
	if err != nil {
		return args
	}
	return out
}
