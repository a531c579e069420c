package config

import (
	"errors"
	"fmt"
	"os"
	"reflect"
	"strings"

	"github.com/spf13/viper"
)

// FileEnv names the environment variable that points at an optional YAML file.
const FileEnv = "SVC_CONFIG_FILE"

// Setting describes one leaf setting, for validation messages and the README.
type Setting struct {
	Key      string // YAML key path, e.g. "database.url"
	Env      string
	Default  string
	Doc      string
	Secret   bool
	Required bool
}

// Settings lists every setting in declaration order.
func Settings() []Setting {
	var out []Setting
	walk(reflect.TypeOf(Config{}), "", func(key string, f reflect.StructField) {
		out = append(out, Setting{
			Key: key, Env: f.Tag.Get("env"), Default: f.Tag.Get("default"), Doc: f.Tag.Get("doc"),
			Secret: f.Tag.Get("secret") == "true", Required: f.Tag.Get("required") == "true",
		})
	})
	return out
}

func walk(t reflect.Type, prefix string, leaf func(key string, f reflect.StructField)) {
	for i := range t.NumField() {
		f := t.Field(i)
		key := f.Tag.Get("mapstructure")
		if prefix != "" {
			key = prefix + "." + key
		}
		if f.Type.Kind() == reflect.Struct && f.Tag.Get("env") == "" {
			walk(f.Type, key, leaf)
			continue
		}
		leaf(key, f)
	}
}

// Load reads the YAML file named by SVC_CONFIG_FILE (when set), then the
// environment over it, unmarshals once into Config and validates it. The
// error names the offending setting by its environment variable.
func Load() (Config, error) {
	return load(os.Getenv(FileEnv))
}

// Defaults returns the configuration made of the defaults alone, without
// the environment or a file and without validation (required settings are
// empty). Tests start from it so they never restate a default.
func Defaults() Config {
	v := viper.New()
	for _, s := range Settings() {
		v.SetDefault(s.Key, s.Default)
	}
	var cfg Config
	if err := v.Unmarshal(&cfg); err != nil { // the tags are ours: a bad default is a bug
		panic(fmt.Sprintf("config: defaults do not decode: %v", err))
	}
	cfg.Deposits.USDTPool = compact(cfg.Deposits.USDTPool)
	return cfg
}

func load(file string) (Config, error) {
	v := viper.New()
	settings := Settings()
	for _, s := range settings {
		v.SetDefault(s.Key, s.Default)
		if err := v.BindEnv(s.Key, s.Env); err != nil {
			return Config{}, fmt.Errorf("bind %s: %w", s.Env, err)
		}
	}
	if file != "" {
		v.SetConfigFile(file)
		if err := v.ReadInConfig(); err != nil {
			return Config{}, fmt.Errorf("%s: read %s: %w", FileEnv, file, err)
		}
	}
	var cfg Config
	if err := v.Unmarshal(&cfg); err != nil {
		return Config{}, nameSetting(err, settings)
	}
	for i, a := range cfg.Deposits.USDTPool { // "a, b" from the environment
		cfg.Deposits.USDTPool[i] = strings.TrimSpace(a)
	}
	cfg.Deposits.USDTPool = compact(cfg.Deposits.USDTPool)
	for i, a := range cfg.HTTP.TrustedProxies {
		cfg.HTTP.TrustedProxies[i] = strings.TrimSpace(a)
	}
	cfg.HTTP.TrustedProxies = compact(cfg.HTTP.TrustedProxies)
	var missing []string
	for _, s := range settings {
		if s.Required && strings.TrimSpace(v.GetString(s.Key)) == "" {
			missing = append(missing, s.Env+" is required ("+s.Doc+")")
		}
	}
	if len(missing) > 0 {
		return Config{}, errors.New("invalid configuration: " + strings.Join(missing, "; "))
	}
	if err := cfg.Validate(); err != nil {
		return Config{}, err
	}
	return cfg, nil
}

func compact(in []string) []string {
	out := in[:0]
	for _, s := range in {
		if s != "" {
			out = append(out, s)
		}
	}
	return out
}

// nameSetting rewrites a decoding error so it names the environment variable.
func nameSetting(err error, settings []Setting) error {
	msg := err.Error()
	var named []string
	for _, s := range settings {
		if strings.Contains(msg, "'"+s.Key+"'") || strings.Contains(msg, `"`+s.Key+`"`) {
			named = append(named, s.Env)
		}
	}
	if len(named) == 0 {
		return fmt.Errorf("invalid configuration: %w", err)
	}
	return fmt.Errorf("invalid configuration: %s: bad value: %w", strings.Join(named, ", "), err)
}
