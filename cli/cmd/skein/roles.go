package main

import (
	"fmt"
	"slices"
	"strings"

	"github.com/skein-mesh/skein/pkg/protocol"
)

// allRoles are the roles `skein up` runs, in the order it starts them; `--roles` picks some.
var allRoles = []string{"toolhost", "memoryd", protocol.RoleExecutor, "gateway", protocol.RolePlanner, protocol.RoleMiner}

// roleSet is the roles a process runs; nil means every one.
type roleSet map[string]bool

func (r roleSet) has(role string) bool { return r == nil || r[role] }

// parseRoles reads --roles: role names separated by commas ("all" for every one).
func parseRoles(s string) (roleSet, error) {
	r := roleSet{}
	for _, name := range strings.Split(s, ",") {
		name = strings.ToLower(strings.TrimSpace(name))
		switch {
		case name == "":
		case name == "all":
			return nil, nil
		case slices.Contains(allRoles, name):
			r[name] = true
		default:
			return nil, fmt.Errorf("--roles: unknown role %q; the roles are %s (or all)", name, strings.Join(allRoles, ", "))
		}
	}
	if len(r) == 0 {
		return nil, fmt.Errorf("--roles: no role given; the roles are %s (or all); `skein server` runs the NATS server alone", strings.Join(allRoles, ", "))
	}
	return r, nil
}

// list is the roles of r by name, in start order (every role for nil).
func (r roleSet) list() []string {
	var out []string
	for _, role := range allRoles {
		if r.has(role) {
			out = append(out, role)
		}
	}
	return out
}

func (r roleSet) String() string { return strings.Join(r.list(), ", ") }
