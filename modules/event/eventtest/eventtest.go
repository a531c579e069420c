// Package eventtest checks emitted events against the published payload
// schema (docs/events.schema.json), so that every area's tests can prove
// that what they emit is what receivers were promised.
//
//	eventtest.RequireValid(t, payload)      // one payload
//	eventtest.RequireAllValid(t, a.DB.Bun)  // every event in a test database
package eventtest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/uptrace/bun"
)

// SchemaPath is the schema's path from the module root.
const SchemaPath = "docs/events.schema.json"

var (
	once     sync.Once
	compiled *jsonschema.Schema
	raw      map[string]any
	loadErr  error
)

// Schema returns the compiled schema and its decoded document. The file is
// found by walking up from the working directory to go.mod, so it works
// from any package's tests.
func Schema(t testing.TB) (*jsonschema.Schema, map[string]any) {
	t.Helper()
	once.Do(func() { compiled, raw, loadErr = load() })
	if loadErr != nil {
		t.Fatalf("eventtest: %v", loadErr)
	}
	return compiled, raw
}

func load() (*jsonschema.Schema, map[string]any, error) {
	root, err := moduleRoot()
	if err != nil {
		return nil, nil, err
	}
	b, err := os.ReadFile(filepath.Join(root, SchemaPath))
	if err != nil {
		return nil, nil, err
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(b))
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", SchemaPath, err)
	}
	c := jsonschema.NewCompiler()
	c.AssertFormat()
	if err := c.AddResource(SchemaPath, doc); err != nil {
		return nil, nil, fmt.Errorf("%s: %w", SchemaPath, err)
	}
	sch, err := c.Compile(SchemaPath)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", SchemaPath, err)
	}
	m, ok := doc.(map[string]any)
	if !ok {
		return nil, nil, fmt.Errorf("%s: not a JSON object", SchemaPath)
	}
	return sch, m, nil
}

func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("go.mod not found above the working directory")
		}
		dir = parent
	}
}

// Validate reports whether payload (an event body) fits the schema.
func Validate(t testing.TB, payload []byte) error {
	t.Helper()
	sch, _ := Schema(t)
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(payload))
	if err != nil {
		return fmt.Errorf("not JSON: %w", err)
	}
	return sch.Validate(inst)
}

// RequireValid fails t unless payload fits the schema.
func RequireValid(t testing.TB, payload []byte) {
	t.Helper()
	if err := Validate(t, payload); err != nil {
		t.Fatalf("event payload does not fit %s: %v\npayload: %s", SchemaPath, err, payload)
	}
}

// RequireAllValid validates the payload of every event in the database and
// returns how many there were. Call it at the end of a scenario.
func RequireAllValid(t testing.TB, db bun.IDB) int {
	t.Helper()
	var payloads []json.RawMessage
	if err := db.NewSelect().Table("outbound_events").Column("payload").OrderExpr("created_at, id").
		Scan(context.Background(), &payloads); err != nil {
		t.Fatalf("eventtest: read events: %v", err)
	}
	for _, p := range payloads {
		RequireValid(t, p)
	}
	return len(payloads)
}
