package vector

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
)

// File names inside a Store's directory.
const (
	snapshotFile = "hnsw.snap"
	walFile      = "hnsw.wal"
)

// snapshotMagic opens every snapshot; the digits are the format version.
var snapshotMagic = [8]byte{'A', 'M', 'H', 'N', 'S', 'W', '0', '1'}

// WAL record operations.
const (
	opAdd    byte = 1
	opDelete byte = 2
	opDelDoc byte = 3
)

// DefaultSnapshotBytes is the write-ahead log size past which a Store
// writes a new snapshot and empties the log.
const DefaultSnapshotBytes = 64 << 20

// Store is an [Index] kept on disk in a directory: a snapshot of the whole
// graph plus a write-ahead log of the writes made since. Every write is
// appended to the log and fsynced before it is applied, so a write that
// returned survives a crash. Open loads the snapshot and replays the log
// (a torn last record, from a crash mid-append, is dropped); once the log
// outgrows SnapshotBytes, and on Close, the index is snapshotted (to a
// temporary file, fsynced, renamed) and the log emptied. Store is safe for
// concurrent use.
type Store struct {
	*Index
	dir string
	log *slog.Logger

	wmu           sync.Mutex // serialises writes; guards the fields below
	wal           *os.File
	walBytes      int64
	snapshotBytes int64
	closed        bool
}

// StoreOptions tunes a Store.
type StoreOptions struct {
	// Params of a new index; an index loaded from a snapshot keeps its own.
	Params Params
	// SnapshotBytes overrides DefaultSnapshotBytes.
	SnapshotBytes int64
	// Logger receives recovery notices; nil discards them.
	Logger *slog.Logger
}

// Open opens (creating if needed) the index in dir for dim-dimensional
// vectors. It fails if the snapshot has another dimension or is corrupt.
func Open(dir string, dim int, opts StoreOptions) (*Store, error) {
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return nil, fmt.Errorf("vector: open %s: %w", dir, err)
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Store{dir: dir, log: log, snapshotBytes: opts.SnapshotBytes}
	if s.snapshotBytes <= 0 {
		s.snapshotBytes = DefaultSnapshotBytes
	}
	ix, err := loadSnapshot(filepath.Join(dir, snapshotFile))
	switch {
	case errors.Is(err, fs.ErrNotExist):
		ix = New(dim, opts.Params)
	case err != nil:
		return nil, err
	case ix.dim != dim:
		return nil, fmt.Errorf("%w: snapshot in %s has %d dimensions, want %d", ErrDimension, dir, ix.dim, dim)
	}
	s.Index = ix
	valid, err := s.replay(filepath.Join(dir, walFile))
	if err != nil {
		return nil, err
	}
	f, err := os.OpenFile(filepath.Join(dir, walFile), os.O_CREATE|os.O_WRONLY, 0o640)
	if err != nil {
		return nil, fmt.Errorf("vector: open log: %w", err)
	}
	// Cut a torn tail so new records follow the last good one.
	if err := f.Truncate(valid); err != nil {
		f.Close()
		return nil, fmt.Errorf("vector: truncate log: %w", err)
	}
	if _, err := f.Seek(valid, io.SeekStart); err != nil {
		f.Close()
		return nil, fmt.Errorf("vector: seek log: %w", err)
	}
	s.wal, s.walBytes = f, valid
	return s, nil
}

// Add validates, logs and inserts items (see [Index.Add]).
func (s *Store) Add(items ...Item) error {
	if len(items) == 0 {
		return nil
	}
	for i, it := range items {
		if _, err := s.prepare(it); err != nil {
			return fmt.Errorf("item %d (%q): %w", i, it.Key, err)
		}
	}
	return s.write(encodeAdd(items), func() error { return s.Index.Add(items...) })
}

// Delete logs and removes the items with these keys (see [Index.Delete]).
func (s *Store) Delete(keys ...string) (int, error) {
	if len(keys) == 0 {
		return 0, nil
	}
	var n int
	err := s.write(encodeKeys(opDelete, keys), func() error { n = s.Index.Delete(keys...); return nil })
	return n, err
}

// DeleteDocument logs and removes every item of doc (see
// [Index.DeleteDocument]).
func (s *Store) DeleteDocument(doc string) ([]string, error) {
	var keys []string
	err := s.write(encodeKeys(opDelDoc, []string{doc}), func() error { keys = s.Index.DeleteDocument(doc); return nil })
	return keys, err
}

// write appends a record, fsyncs it, applies it, and snapshots when the log
// has grown past the threshold.
func (s *Store) write(payload []byte, apply func() error) error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if s.closed {
		return errors.New("vector: store closed")
	}
	rec := make([]byte, 8, 8+len(payload))
	binary.LittleEndian.PutUint32(rec[0:4], uint32(len(payload)))
	binary.LittleEndian.PutUint32(rec[4:8], crc32.ChecksumIEEE(payload))
	rec = append(rec, payload...)
	if _, err := s.wal.Write(rec); err != nil {
		return fmt.Errorf("vector: append log: %w", err)
	}
	if err := s.wal.Sync(); err != nil {
		return fmt.Errorf("vector: sync log: %w", err)
	}
	s.walBytes += int64(len(rec))
	if err := apply(); err != nil {
		return err
	}
	if s.walBytes >= s.snapshotBytes {
		return s.snapshotLocked()
	}
	return nil
}

// Snapshot writes the whole index to disk and empties the log.
func (s *Store) Snapshot() error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if s.closed {
		return errors.New("vector: store closed")
	}
	return s.snapshotLocked()
}

func (s *Store) snapshotLocked() error {
	if err := s.Index.writeSnapshot(filepath.Join(s.dir, snapshotFile)); err != nil {
		return err
	}
	// The snapshot holds every logged write; a crash before the truncate
	// replays them again, which converges (adds replace, deletes no-op).
	if err := s.wal.Truncate(0); err != nil {
		return fmt.Errorf("vector: truncate log: %w", err)
	}
	if _, err := s.wal.Seek(0, io.SeekStart); err != nil {
		return fmt.Errorf("vector: seek log: %w", err)
	}
	s.walBytes = 0
	return s.wal.Sync()
}

// Close snapshots the index if the log is not empty, and closes the log.
// The Store must not be used afterwards.
func (s *Store) Close() error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	var err error
	if s.walBytes > 0 {
		err = s.snapshotLocked()
	}
	return errors.Join(err, s.wal.Close())
}

// replay applies the log's records to s.Index and returns the length of
// its valid prefix.
func (s *Store) replay(path string) (int64, error) {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("vector: open log: %w", err)
	}
	defer f.Close()
	r := bufio.NewReaderSize(f, 1<<20)
	var off int64
	var hdr [8]byte
	for {
		if _, err := io.ReadFull(r, hdr[:]); err != nil {
			if !errors.Is(err, io.EOF) {
				s.log.Warn("vector log ends in a torn record; dropping it", "dir", s.dir, "offset", off)
			}
			return off, nil
		}
		n := binary.LittleEndian.Uint32(hdr[0:4])
		payload := make([]byte, n)
		if _, err := io.ReadFull(r, payload); err != nil || crc32.ChecksumIEEE(payload) != binary.LittleEndian.Uint32(hdr[4:8]) {
			s.log.Warn("vector log ends in a torn record; dropping it", "dir", s.dir, "offset", off)
			return off, nil
		}
		if err := s.apply(payload); err != nil {
			return 0, fmt.Errorf("vector: replay log at %d: %w", off, err)
		}
		off += 8 + int64(n)
	}
}

// apply replays one record.
func (s *Store) apply(payload []byte) error {
	if len(payload) == 0 {
		return errCorrupt
	}
	d := &decoder{r: bufio.NewReader(bytes.NewReader(payload[1:]))}
	switch payload[0] {
	case opAdd:
		n := d.uvarint()
		if n > uint64(len(payload)) {
			return errCorrupt
		}
		items := make([]Item, 0, n)
		for range n {
			it := Item{Key: d.str()}
			it.Attrs.Doc = d.str()
			it.Attrs.ContentType = d.str()
			it.Attrs.SourceType = int32(d.varint())
			dim := d.uvarint()
			if dim != uint64(s.dim) {
				return fmt.Errorf("%w: logged vector of %d dimensions", ErrDimension, dim)
			}
			it.Vector = make([]float32, dim)
			d.floats(it.Vector)
			items = append(items, it)
		}
		if d.err != nil {
			return d.err
		}
		return s.Index.Add(items...)
	case opDelete, opDelDoc:
		n := d.uvarint()
		if n > uint64(len(payload)) {
			return errCorrupt
		}
		keys := make([]string, 0, n)
		for range n {
			keys = append(keys, d.str())
		}
		if d.err != nil {
			return d.err
		}
		if payload[0] == opDelete {
			s.Index.Delete(keys...)
		} else {
			for _, k := range keys {
				s.Index.DeleteDocument(k)
			}
		}
		return nil
	}
	return fmt.Errorf("%w: unknown log op %d", errCorrupt, payload[0])
}

func encodeAdd(items []Item) []byte {
	var b bytes.Buffer
	b.WriteByte(opAdd)
	e := &encoder{w: bufio.NewWriter(&b)}
	e.uvarint(uint64(len(items)))
	for _, it := range items {
		e.str(it.Key)
		e.str(it.Attrs.Doc)
		e.str(it.Attrs.ContentType)
		e.varint(int64(it.Attrs.SourceType))
		e.uvarint(uint64(len(it.Vector)))
		e.floats(it.Vector)
	}
	e.w.Flush()
	return b.Bytes()
}

func encodeKeys(op byte, keys []string) []byte {
	var b bytes.Buffer
	b.WriteByte(op)
	e := &encoder{w: bufio.NewWriter(&b)}
	e.uvarint(uint64(len(keys)))
	for _, k := range keys {
		e.str(k)
	}
	e.w.Flush()
	return b.Bytes()
}

// writeSnapshot writes the index to path atomically: a temporary file,
// fsynced, renamed over path, and the directory fsynced.
func (ix *Index) writeSnapshot(path string) error {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	tmp, err := os.CreateTemp(filepath.Dir(path), ".snap-*")
	if err != nil {
		return fmt.Errorf("vector: snapshot: %w", err)
	}
	defer os.Remove(tmp.Name()) // no-op after the rename
	crc := crc32.NewIEEE()
	bw := bufio.NewWriterSize(io.MultiWriter(tmp, crc), 1<<20)
	e := &encoder{w: bw}
	e.bytes(snapshotMagic[:])
	rngState, err := ix.pcg.MarshalBinary()
	if err != nil {
		tmp.Close()
		return fmt.Errorf("vector: snapshot rng: %w", err)
	}
	e.uvarint(uint64(ix.dim))
	e.uvarint(uint64(ix.p.M))
	e.uvarint(uint64(ix.p.EfConstruction))
	e.uvarint(uint64(ix.p.EfSearch))
	e.uvarint(ix.p.Seed)
	e.str(string(rngState))
	e.uvarint(uint64(len(ix.level)))
	e.uvarint(uint64(ix.entry))
	e.varint(int64(ix.maxLevel))
	for id := range uint32(len(ix.level)) {
		lvl := int(ix.level[id])
		e.varint(int64(lvl))
		if lvl < 0 {
			continue
		}
		e.str(ix.keys[id])
		e.str(ix.docs.names[ix.docOf[id]])
		e.str(ix.ctypes.names[ix.ctypeOf[id]])
		e.varint(int64(ix.srcOf[id]))
		e.floats(ix.vec(id))
		for lc := 0; lc <= lvl; lc++ {
			ls := ix.links(id, lc)
			e.uvarint(uint64(len(ls)))
			for _, n := range ls {
				e.uvarint(uint64(n))
			}
		}
	}
	if e.err == nil {
		e.err = bw.Flush()
	}
	if e.err == nil {
		var sum [4]byte
		binary.LittleEndian.PutUint32(sum[:], crc.Sum32())
		_, e.err = tmp.Write(sum[:])
	}
	if e.err == nil {
		e.err = tmp.Sync()
	}
	if cerr := tmp.Close(); e.err == nil {
		e.err = cerr
	}
	if e.err != nil {
		return fmt.Errorf("vector: snapshot: %w", e.err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("vector: snapshot: %w", err)
	}
	return syncDir(filepath.Dir(path))
}

// loadSnapshot reads an index written by writeSnapshot. It returns an error
// wrapping fs.ErrNotExist when there is none.
func loadSnapshot(path string) (*Index, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	if len(data) < len(snapshotMagic)+4 {
		return nil, fmt.Errorf("%w: snapshot %s too short", errCorrupt, path)
	}
	body, sum := data[:len(data)-4], binary.LittleEndian.Uint32(data[len(data)-4:])
	if crc32.ChecksumIEEE(body) != sum {
		return nil, fmt.Errorf("%w: snapshot %s checksum mismatch", errCorrupt, path)
	}
	if !bytes.Equal(body[:8], snapshotMagic[:]) {
		return nil, fmt.Errorf("%w: snapshot %s has an unknown format", errCorrupt, path)
	}
	d := &decoder{r: bufio.NewReaderSize(bytes.NewReader(body[8:]), 1<<20)}
	dim := int(d.uvarint())
	p := Params{M: int(d.uvarint()), EfConstruction: int(d.uvarint()), EfSearch: int(d.uvarint()), Seed: d.uvarint()}
	rngState := d.str()
	slots := d.uvarint()
	entry := uint32(d.uvarint())
	maxLevel := int(d.varint())
	if d.err != nil || dim <= 0 || p.M <= 0 || slots > uint64(len(body)) {
		return nil, fmt.Errorf("%w: snapshot %s header", errCorrupt, path)
	}
	ix := New(dim, p)
	if err := ix.pcg.UnmarshalBinary([]byte(rngState)); err != nil {
		return nil, fmt.Errorf("%w: snapshot %s rng: %v", errCorrupt, path, err)
	}
	ix.vecs = make([]float32, int(slots)*dim)
	ix.codes = make([]int8, int(slots)*dim)
	ix.scales = make([]float32, slots)
	ix.level = make([]int8, slots)
	ix.links0 = make([]uint32, int(slots)*(ix.m0+1))
	ix.upper = make([][]uint32, slots)
	ix.keys = make([]string, slots)
	ix.docOf = make([]uint32, slots)
	ix.srcOf = make([]int32, slots)
	ix.ctypeOf = make([]uint32, slots)
	for id := range uint32(slots) {
		lvl := int(d.varint())
		if d.err != nil || lvl >= maxLevels {
			return nil, fmt.Errorf("%w: snapshot %s node %d", errCorrupt, path, id)
		}
		if lvl < 0 {
			ix.level[id] = -1
			ix.free = append(ix.free, id)
			continue
		}
		it := Item{Key: d.str()}
		it.Attrs.Doc = d.str()
		it.Attrs.ContentType = d.str()
		it.Attrs.SourceType = int32(d.varint())
		v := make([]float32, dim)
		d.floats(v)
		ix.place(id, it, v, lvl)
		for lc := 0; lc <= lvl; lc++ {
			n := int(d.uvarint())
			if n > ix.capacity(lc) {
				return nil, fmt.Errorf("%w: snapshot %s node %d has %d links", errCorrupt, path, id, n)
			}
			ls := make([]uint32, n)
			for i := range ls {
				ls[i] = uint32(d.uvarint())
				if uint64(ls[i]) >= slots {
					return nil, fmt.Errorf("%w: snapshot %s node %d links outside the index", errCorrupt, path, id)
				}
			}
			ix.setLinks(id, lc, ls)
		}
	}
	if d.err != nil {
		return nil, fmt.Errorf("%w: snapshot %s: %v", errCorrupt, path, d.err)
	}
	ix.entry, ix.maxLevel = entry, maxLevel
	if ix.live == 0 {
		ix.maxLevel = -1
	}
	// Same order as removeSlots leaves it.
	reverseSlots(ix.free)
	return ix, nil
}

func reverseSlots(s []uint32) {
	for i, j := 0, len(s)-1; i < j; i, j = i+1, j-1 {
		s[i], s[j] = s[j], s[i]
	}
}

// syncDir fsyncs a directory so a rename in it is durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("vector: sync %s: %w", dir, err)
	}
	return nil
}
