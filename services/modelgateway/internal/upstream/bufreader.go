package upstream

import (
	"bufio"
	"io"
	"sync"
)

// bodyReaders holds the buffered readers stream parsers read answer bodies
// through. A stream is short-lived and its buffer (16 KiB) was the largest
// allocation of a streamed call; reusing it keeps the collector quiet.
var bodyReaders = sync.Pool{New: func() any { return bufio.NewReaderSize(nil, readBufSize) }}

// AcquireReader returns a buffered reader over r. Give it back with
// ReleaseReader once nothing read from it is referenced any more.
func AcquireReader(r io.Reader) *bufio.Reader {
	br := bodyReaders.Get().(*bufio.Reader)
	br.Reset(r)
	return br
}

// ReleaseReader drops br's reference to its source and pools it.
func ReleaseReader(br *bufio.Reader) {
	br.Reset(nil)
	bodyReaders.Put(br)
}
