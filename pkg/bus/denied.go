package bus

import (
	"errors"
	"regexp"
	"sync"

	"github.com/nats-io/nats.go"
)

// The server refuses a request it does not permit without answering it: the requester would wait
// for its whole timeout and then retry as if the responder were slow. denials lets Request stop
// at once instead, with the reason.

// denials holds, per connection, the callbacks waiting on a refusal to publish to a subject.
var denials sync.Map // *nats.Conn -> *denyWatch

type denyWatch struct {
	mu      sync.Mutex
	next    int
	waiting map[string]map[int]func(error)
}

var deniedPublishRE = regexp.MustCompile(`Publish to "([^"]+)"`)

// noteDenial passes a permissions violation to whoever waits on its subject.
func noteDenial(nc *nats.Conn, err error) {
	if nc == nil || !errors.Is(err, nats.ErrPermissionViolation) {
		return
	}
	v, ok := denials.Load(nc)
	if !ok {
		return
	}
	m := deniedPublishRE.FindStringSubmatch(err.Error())
	if m == nil {
		return
	}
	w := v.(*denyWatch)
	w.mu.Lock()
	fns := make([]func(error), 0, len(w.waiting[m[1]]))
	for _, fn := range w.waiting[m[1]] {
		fns = append(fns, fn)
	}
	w.mu.Unlock()
	for _, fn := range fns {
		fn(err)
	}
}

// onDenied calls fn if the server refuses a publish to subject on nc before stop is called.
func onDenied(nc *nats.Conn, subject string, fn func(error)) (stop func()) {
	v, ok := denials.Load(nc)
	if !ok {
		return func() {}
	}
	w := v.(*denyWatch)
	w.mu.Lock()
	if w.waiting == nil {
		w.waiting = map[string]map[int]func(error){}
	}
	if w.waiting[subject] == nil {
		w.waiting[subject] = map[int]func(error){}
	}
	id := w.next
	w.next++
	w.waiting[subject][id] = fn
	w.mu.Unlock()
	return func() {
		w.mu.Lock()
		delete(w.waiting[subject], id)
		if len(w.waiting[subject]) == 0 {
			delete(w.waiting, subject)
		}
		w.mu.Unlock()
	}
}
