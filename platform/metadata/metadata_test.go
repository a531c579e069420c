package metadata

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"svc/platform/fault"
)

func fields(t *testing.T, err error) []fault.FieldError {
	t.Helper()
	var fe *fault.Error
	if !errors.As(err, &fe) || fe.Kind != fault.Invalid {
		t.Fatalf("want a 422 fault, got %v", err)
	}
	return fe.Fields
}

func TestNilMarshalsAsEmptyObject(t *testing.T) {
	var m Metadata
	b, err := json.Marshal(m)
	if err != nil || string(b) != "{}" {
		t.Fatalf("nil metadata = %s, %v; want {}", b, err)
	}
	b, _ = json.Marshal(struct {
		M Metadata `json:"metadata"`
	}{})
	if string(b) != `{"metadata":{}}` {
		t.Fatalf("nil metadata field = %s", b)
	}
	b, _ = json.Marshal(Metadata{"a": "b"})
	if string(b) != `{"a":"b"}` {
		t.Fatalf("metadata = %s", b)
	}
	v, _ := m.Value()
	if v != "{}" {
		t.Fatalf("nil metadata stores %v", v)
	}
}

func TestScan(t *testing.T) {
	var m Metadata
	if err := m.Scan([]byte(`{"order":"42"}`)); err != nil || !reflect.DeepEqual(m, Metadata{"order": "42"}) {
		t.Fatalf("scan bytes: %v %v", m, err)
	}
	if err := m.Scan(nil); err != nil || m == nil || len(m) != 0 {
		t.Fatalf("scan NULL: %#v %v", m, err)
	}
	if err := m.Scan(`{"x":1}`); err == nil {
		t.Fatal("a non-string value scanned")
	}
}

func TestCheckAcceptsTheLimits(t *testing.T) {
	m := Metadata{}
	for i := 0; i < MaxKeys; i++ {
		m[fmt.Sprintf("%02d%s", i, strings.Repeat("k", MaxKeyLength-2))] = strings.Repeat("é", MaxValueLength)
	}
	m["00"+strings.Repeat("k", MaxKeyLength-2)] = "" // an empty value is allowed
	if err := m.Check("body", "metadata"); err != nil {
		t.Fatal(err)
	}
	if err := Metadata(nil).Check("body", "metadata"); err != nil {
		t.Fatal(err)
	}
}

func TestCheckNamesTheKey(t *testing.T) {
	long := strings.Repeat("k", MaxKeyLength+1)
	cases := []struct {
		name string
		m    Metadata
		loc  []any
		typ  string
	}{
		{"key too long", Metadata{long: "v"}, []any{"body", "metadata", long}, "string_too_long"},
		{"key empty", Metadata{"": "v"}, []any{"body", "metadata", ""}, "string_too_short"},
		{"value too long", Metadata{"note": strings.Repeat("v", MaxValueLength+1)}, []any{"body", "metadata", "note"}, "string_too_long"},
		{"value with NUL", Metadata{"note": "a\x00b"}, []any{"body", "metadata", "note"}, "string_type"},
		{"value not UTF-8", Metadata{"note": "\xff"}, []any{"body", "metadata", "note"}, "string_type"},
		{"key with NUL", Metadata{"a\x00": "v"}, []any{"body", "metadata", "a\x00"}, "string_type"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := fields(t, c.m.Check("body", "metadata"))
			if len(got) != 1 || !reflect.DeepEqual(got[0].Loc, c.loc) || got[0].Type != c.typ {
				t.Fatalf("got %+v; want one %s at %v", got, c.typ, c.loc)
			}
		})
	}
}

func TestCheckTooManyKeys(t *testing.T) {
	m := Metadata{}
	for i := 0; i <= MaxKeys; i++ {
		m[fmt.Sprint("k", i)] = "v"
	}
	got := fields(t, m.Check("body", "metadata"))
	if len(got) != 1 || !reflect.DeepEqual(got[0].Loc, []any{"body", "metadata"}) || got[0].Type != "too_long" {
		t.Fatalf("got %+v", got)
	}
}

func TestCheckReportsEveryKeyInOrder(t *testing.T) {
	long := strings.Repeat("v", MaxValueLength+1)
	got := fields(t, Metadata{"b": long, "a": long, "ok": "fine"}.Check("legs", "0", "metadata"))
	if len(got) != 2 || got[0].Loc[3] != "a" || got[1].Loc[3] != "b" || got[0].Loc[0] != "legs" {
		t.Fatalf("got %+v", got)
	}
}
