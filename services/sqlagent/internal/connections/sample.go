package connections

import (
	_ "embed"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// SampleName is the connection name of the sample database.
const SampleName = "sample"

//go:embed sample.sql
var sampleSQL string

// CreateSample makes the sample SQLite database (a small shop: customers,
// products, orders, order_items) at path unless a file is there already,
// and returns its connection spec. The database is built in a temporary
// file and renamed into place, so a crash never leaves half of one.
func CreateSample(path string) (Spec, error) {
	spec := Spec{Name: SampleName, Dialect: SQLite, DSN: path}
	if _, err := os.Stat(path); err == nil {
		return spec, nil
	} else if !errors.Is(err, fs.ErrNotExist) {
		return Spec{}, fmt.Errorf("sample database %s: %w", path, err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return Spec{}, fmt.Errorf("sample database: %w", err)
	}
	tmp := path + ".tmp"
	_ = os.Remove(tmp) // what an interrupted earlier attempt left
	if err := writeSample(tmp); err != nil {
		_ = os.Remove(tmp)
		return Spec{}, fmt.Errorf("sample database %s: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		_ = os.Remove(tmp)
		return Spec{}, fmt.Errorf("sample database %s: %w", path, err)
	}
	return spec, nil
}

// writeSample creates the sample's tables and rows in a new file at path.
func writeSample(path string) error {
	db, err := openSQLite(path, false)
	if err != nil {
		return err
	}
	if _, err := db.Exec(sampleSQL); err != nil {
		_ = db.Close()
		return err
	}
	return db.Close()
}
