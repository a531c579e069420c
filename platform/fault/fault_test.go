package fault

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestMergeValidation(t *testing.T) {
	t.Parallel()
	a := Validation(FieldError{Loc: []any{"query", "limit"}, Msg: "bad", Type: "int_parsing"})
	b := Validation(FieldError{Loc: []any{"query", "cursor"}, Msg: "bad", Type: "int_parsing"})
	require.NoError(t, MergeValidation(nil, nil))
	var fe *Error
	require.True(t, errors.As(MergeValidation(a, nil, b), &fe))
	require.Len(t, fe.Fields, 2)
	other := New(NotFound, "unknown asset")
	require.Same(t, other, MergeValidation(a, other))
	require.Equal(t, Invalid, KindOf(wrapped(a)))
}

func wrapped(err error) error { return errors.Join(errors.New("context"), err) }

func TestValidationErrorNamesItsFields(t *testing.T) {
	t.Parallel()
	err := Validation(FieldError{Loc: []any{"body", "note"}, Msg: "String should have at most 2000 characters"},
		FieldError{Loc: []any{"query", "limit"}, Msg: "Input should be a valid integer"})
	require.Equal(t, "request does not fit the model: body.note: String should have at most 2000 characters; query.limit: Input should be a valid integer", err.Error())
}
