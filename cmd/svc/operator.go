package main

import (
	"fmt"
	"os"
	"os/user"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"svc/modules/audit"
	"svc/modules/operator"
)

// KeyEnv names the operator's key file when --key is not given.
const KeyEnv = "SVC_OPERATOR_KEY"

// keyFlag adds --key, the operator's private key file, to c.
func keyFlag(c *cobra.Command, path *string) {
	c.Flags().StringVar(path, "key", "", "the operator's private key file (svc admin operators keygen), which names the operator; default $"+KeyEnv)
}

// loadKey reads the operator's key: --key, else $SVC_OPERATOR_KEY.
func loadKey(path string) (*operator.Signer, error) {
	if path == "" {
		path = os.Getenv(KeyEnv)
	}
	if path == "" {
		return nil, fmt.Errorf("--key FILE (or %s) is required: this action is signed with the operator's key (svc admin operators keygen)", KeyEnv)
	}
	return operator.LoadKeyFile(path)
}

// signWith signs x's statement, now, with the operator's key (--key or
// $SVC_OPERATOR_KEY).
func signWith(path string, x operator.Expect) (*operator.Envelope, error) {
	s, err := loadKey(path)
	if err != nil {
		return nil, err
	}
	e, err := s.Sign(operator.NewStatement(x.Action, x.Resource, x.Facts, time.Now()))
	if err != nil {
		return nil, err
	}
	return &e, nil
}

// loginActor is the command-line operator of an action that needs no
// signature and was given no key: the login name, "cli:LOGIN", as the
// audit trail records it.
func loginActor() (audit.Actor, error) {
	name := ""
	if u, err := user.Current(); err == nil {
		name = u.Username
	}
	if name == "" {
		name = os.Getenv("USER")
	}
	name = strings.TrimSpace(name)
	if name == "" || len(name) > 251 {
		return audit.Actor{}, fmt.Errorf("no login name to record: give --key FILE to act as an enrolled operator")
	}
	return audit.CLI(name), nil
}
