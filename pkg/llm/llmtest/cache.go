package llmtest

import "time"

// prefixCache remembers prompt prefixes by the hash of their content, with an expiry that a
// hit refreshes, as the providers' caches do.
type prefixCache struct {
	entries map[string]entry
	now     func() time.Time
}

type entry struct {
	expires time.Time
	ttl     time.Duration
}

func newPrefixCache() *prefixCache {
	return &prefixCache{entries: map[string]entry{}, now: time.Now}
}

func (c *prefixCache) has(h string) bool {
	e, ok := c.entries[h]
	return ok && c.now().Before(e.expires)
}

func (c *prefixCache) refresh(h string) {
	if e, ok := c.entries[h]; ok {
		e.expires = c.now().Add(e.ttl)
		c.entries[h] = e
	}
}

func (c *prefixCache) put(h string, ttl time.Duration) {
	if e, ok := c.entries[h]; ok && e.ttl > ttl {
		ttl = e.ttl
	}
	c.entries[h] = entry{expires: c.now().Add(ttl), ttl: ttl}
}
