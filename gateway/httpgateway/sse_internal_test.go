package httpgateway

import (
	"strings"
	"testing"

	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
)

// A server stream added to a contract needs its SSE event names decided
// here, or clients would get anonymous "message" events. The gateway links
// every agentmesh contract, so the registry holds them all.
func TestEveryServerStreamHasEventNames(t *testing.T) {
	t.Parallel()
	streams := 0
	protoregistry.GlobalFiles.RangeFiles(func(f protoreflect.FileDescriptor) bool {
		if !strings.HasPrefix(string(f.Package()), "agentmesh.") {
			return true
		}
		for i := 0; i < f.Services().Len(); i++ {
			methods := f.Services().Get(i).Methods()
			for j := 0; j < methods.Len(); j++ {
				m := methods.Get(j)
				if !m.IsStreamingServer() {
					continue
				}
				streams++
				if streamEvents[m.Output().FullName()] == nil {
					t.Errorf("%s streams %s, which has no SSE event mapping in streamEvents", m.FullName(), m.Output().FullName())
				}
			}
		}
		return true
	})
	if streams < 6 {
		t.Fatalf("found %d server streams in the registry, want at least the 6 the gateway was built for", streams)
	}
}
