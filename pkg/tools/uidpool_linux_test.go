//go:build linux

package tools

import (
	"strconv"
	"strings"
	"testing"
)

// Two hosts that share the lock folder never hand out the same uid, a host takes the uid freed
// last, and a range used up says so.
func TestTwoHostsNeverShareAUid(t *testing.T) {
	defer func(dirs []string) { uidLockDirs = dirs }(uidLockDirs)
	uidLockDirs = []string{t.TempDir()}
	a, err := newUIDPool("1879048192-1879048194")
	if err != nil {
		t.Fatal(err)
	}
	b, err := newUIDPool("1879048192-1879048194")
	if err != nil {
		t.Fatal(err)
	}
	a.next, b.next = 0, 0 // both look at the same uid first
	held := map[int]string{}
	take := func(p *uidPool, name string) int {
		t.Helper()
		uid, err := p.take()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if other, taken := held[uid]; taken {
			t.Fatalf("uid %d handed to %s while %s holds it", uid, name, other)
		}
		held[uid] = name
		return uid
	}
	first := take(a, "a")
	take(b, "b")
	take(a, "a")
	if _, err := b.take(); err == nil || !strings.Contains(err.Error(), "every uid of tools.sandbox.uids") {
		t.Errorf("a used-up range: %v", err)
	}
	a.put(first)
	delete(held, first)
	if again := take(a, "a"); again != first {
		t.Errorf("a took %d, want %d, the uid it freed last", again, first)
	}
}

// A range that holds the id of an account of the machine is refused.
func TestAUidRangeWithAnAccountIsRefused(t *testing.T) {
	defer func(dirs []string) { uidLockDirs = dirs }(uidLockDirs)
	uidLockDirs = []string{t.TempDir()}
	name, id, ok := idInRange("/etc/passwd", 1, 1<<31)
	if !ok {
		t.Skip("no account with an id in /etc/passwd")
	}
	spec := strconv.Itoa(id) + "-" + strconv.Itoa(id)
	if _, err := newUIDPool(spec); err == nil || !strings.Contains(err.Error(), name) {
		t.Errorf("range %s with %s's id: %v", spec, name, err)
	}
	if _, err := newUIDPool("5-"); err == nil {
		t.Error("a range without its end was taken")
	}
}
