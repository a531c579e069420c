package httpapi

import (
	"encoding/json"
	"testing"
)

// FuzzStrictKeys: a body that strictKeys lets through decodes, with
// encoding/json, to exactly what its exact-named keys say. No key in
// another case, under any Unicode folding the decoder applies, and no
// repeated key can set a field.
func FuzzStrictKeys(f *testing.F) {
	for _, seed := range []string{
		`{"external_user_id":"alice","kind":"a"}`,
		`{"external_user_id":"alice","external_user_id":"mallory"}`,
		`{"External_User_Id":"mallory"}`,
		`{"external_user_id":"alice","external_uſer_id":"mallory"}`,
		`{"external_user_id":"alice","external_u\u017fer_id":"mallory"}`,
		`{"kind":"a","Kind":"b"}`,
		`{"kind":"a","\u212aind":"b"}`,
		`{"KIND":"b","extra":{"kind":1}}`,
		`[1]`, `"x"`, `{`,
	} {
		f.Add([]byte(seed))
	}
	type model struct {
		User *string `json:"external_user_id"`
		Kind *string `json:"kind"`
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		var got model
		if strictKeys(body, &got) != nil || json.Unmarshal(body, &got) != nil {
			return
		}
		var raw map[string]json.RawMessage
		if json.Unmarshal(body, &raw) != nil {
			return
		}
		for name, field := range map[string]*string{"external_user_id": got.User, "kind": got.Kind} {
			var want *string
			if v, ok := raw[name]; ok {
				if err := json.Unmarshal(v, &want); err != nil {
					t.Fatalf("%q: the exact key %s does not decode: %v", body, name, err)
				}
			}
			switch {
			case (want == nil) != (field == nil):
				t.Fatalf("%q: %s is %v, its exact key says %v", body, name, field, want)
			case want != nil && *want != *field:
				t.Fatalf("%q: %s is %q, its exact key says %q", body, name, *field, *want)
			}
		}
	})
}
