package scripted

import (
	"reflect"
	"strings"
	"testing"
)

// Every key the parser reads is explained in Help, which `skein help script` prints.
func TestHelpNamesEveryKey(t *testing.T) {
	var keys []string
	var walk func(reflect.Type)
	walk = func(ty reflect.Type) {
		for ty.Kind() == reflect.Pointer || ty.Kind() == reflect.Slice {
			ty = ty.Elem()
		}
		if ty.Kind() != reflect.Struct || ty.PkgPath() != "" && ty.Name() == "Node" {
			return
		}
		for i := range ty.NumField() {
			f := ty.Field(i)
			if tag, _, _ := strings.Cut(f.Tag.Get("yaml"), ","); tag != "" {
				keys = append(keys, tag)
			}
			walk(f.Type)
		}
	}
	walk(reflect.TypeOf(fileRule{}))
	if len(keys) < 10 {
		t.Fatalf("found only %v in the script's rule type", keys)
	}
	for _, k := range append(keys, "rules") {
		if !strings.Contains(Help, "  "+k+" ") && !strings.Contains(Help, k+":") {
			t.Errorf("Help does not explain %q", k)
		}
	}
}
