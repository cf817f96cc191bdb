package vector

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
)

// errCorrupt marks undecodable snapshot or log data.
var errCorrupt = errors.New("vector: corrupt data")

// encoder writes the little-endian primitives of the on-disk formats.
type encoder struct {
	w   *bufio.Writer
	buf [binary.MaxVarintLen64]byte
	err error
}

func (e *encoder) bytes(b []byte) {
	if e.err == nil {
		_, e.err = e.w.Write(b)
	}
}

func (e *encoder) uvarint(v uint64) { e.bytes(e.buf[:binary.PutUvarint(e.buf[:], v)]) }
func (e *encoder) varint(v int64)   { e.bytes(e.buf[:binary.PutVarint(e.buf[:], v)]) }

func (e *encoder) u32(v uint32) {
	binary.LittleEndian.PutUint32(e.buf[:4], v)
	e.bytes(e.buf[:4])
}

func (e *encoder) str(s string) {
	e.uvarint(uint64(len(s)))
	if e.err == nil {
		_, e.err = e.w.WriteString(s)
	}
}

func (e *encoder) floats(v []float32) {
	for _, f := range v {
		e.u32(math.Float32bits(f))
	}
}

// decoder reads what encoder wrote.
type decoder struct {
	r   *bufio.Reader
	buf [8]byte
	err error
}

func (d *decoder) fail(err error) {
	if d.err == nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		d.err = err
	}
}

func (d *decoder) uvarint() uint64 {
	if d.err != nil {
		return 0
	}
	v, err := binary.ReadUvarint(d.r)
	if err != nil {
		d.fail(err)
	}
	return v
}

func (d *decoder) varint() int64 {
	if d.err != nil {
		return 0
	}
	v, err := binary.ReadVarint(d.r)
	if err != nil {
		d.fail(err)
	}
	return v
}

func (d *decoder) u32() uint32 {
	if d.err != nil {
		return 0
	}
	if _, err := io.ReadFull(d.r, d.buf[:4]); err != nil {
		d.fail(err)
		return 0
	}
	return binary.LittleEndian.Uint32(d.buf[:4])
}

// maxString bounds decoded strings, so corrupt lengths cannot allocate
// gigabytes.
const maxString = 1 << 20

func (d *decoder) str() string {
	n := d.uvarint()
	if d.err != nil {
		return ""
	}
	if n > maxString {
		d.fail(fmt.Errorf("%w: string of %d bytes", errCorrupt, n))
		return ""
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(d.r, b); err != nil {
		d.fail(err)
		return ""
	}
	return string(b)
}

func (d *decoder) floats(v []float32) {
	for i := range v {
		v[i] = math.Float32frombits(d.u32())
	}
}
