package fsm_test

import (
	"fmt"

	"svc/platform/fsm"
)

// A module declares its statuses, its triggers and its rows; its own
// transit then calls Next for the row and Apply to write the step (see
// modules/deposit/deposit_states.go).
func ExampleMachine_Next() {
	type Status string
	type Trigger string
	m := &fsm.Machine[Status, Trigger, fsm.NoEvent]{
		Table: "holds",
		Noun:  "hold",
		Rows: []fsm.Transition[Status, Trigger, fsm.NoEvent]{
			{From: []Status{"open"}, Trigger: "capture", To: "captured"},
			{From: []Status{"open", "captured"}, Trigger: "void", To: "voided"},
		},
	}
	tr, err := m.Next("captured", "void")
	fmt.Println(tr.To, err)
	_, err = m.Next("voided", "capture")
	fmt.Println(err)
	// Output:
	// voided <nil>
	// no transition: capture from voided
}
