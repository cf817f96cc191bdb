package openaiapi

import (
	"crypto/sha256"
	"sync"

	"github.com/agentmesh/agentmesh/services/modelgateway/internal/structured"
)

// toolSchemas remembers the tool parameter schemas that compiled. Agent
// frameworks send the same tools with every request of a conversation,
// and compiling one costs about 0.2 ms of CPU: twenty tools were 4 ms a
// request, twenty times the API's whole overhead. A schema is known by
// the SHA-256 of its bytes; at most maxKnownSchemas are kept, an arbitrary
// one dropped for each new one past that. Schemas that fail are compiled
// again each time (a client fixes them, it does not resend them).
var toolSchemas = &schemaCache{compile: structured.Check}

// maxKnownSchemas bounds toolSchemas (32 bytes a schema).
const maxKnownSchemas = 4096

type schemaCache struct {
	compile func(name string, schema []byte) error

	mu    sync.Mutex
	known map[[sha256.Size]byte]struct{} // guarded by mu
}

// check compiles schema unless one with the same bytes compiled before.
func (c *schemaCache) check(name string, schema []byte) error {
	key := sha256.Sum256(schema)
	c.mu.Lock()
	_, ok := c.known[key]
	c.mu.Unlock()
	if ok {
		return nil
	}
	if err := c.compile(name, schema); err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.known == nil {
		c.known = map[[sha256.Size]byte]struct{}{}
	}
	if len(c.known) >= maxKnownSchemas {
		for k := range c.known { // map order: an arbitrary one
			delete(c.known, k)
			break
		}
	}
	c.known[key] = struct{}{}
	return nil
}
