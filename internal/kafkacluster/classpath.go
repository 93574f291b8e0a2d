package kafkacluster

import (
	"bytes"
	"context"
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// Version is the Apache Kafka release the package runs.
const Version = "4.4.0"

// EnvCache names the environment variable holding the directory the
// broker's classpath is cached in (see DefaultCacheDir).
const EnvCache = "WORKROUTER_KAFKA_CACHE"

// ErrUnavailable is matched by the error of Fetch and Start when this
// machine cannot run a broker: no java, or no classpath cached and no mvn
// to fetch it. Its message says what to install. Tests skip on it (except
// under CI=true, see Testing).
var ErrUnavailable = errors.New("kafkacluster: no Kafka broker can run here")

// pom is the Maven project that copies the broker's runtime classpath into
// a directory; log4j2 configures the broker's logging.
var (
	//go:embed maven/pom.xml
	pom []byte
	//go:embed maven/log4j2.xml
	log4j2 []byte
)

// DefaultCacheDir returns $WORKROUTER_KAFKA_CACHE, or
// <user cache dir>/workrouter/kafka-<Version> ($HOME/.cache/… on Linux).
func DefaultCacheDir() (string, error) {
	if d := os.Getenv(EnvCache); d != "" {
		return filepath.Abs(d)
	}
	base, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("%w: no cache directory (%v); set %s", ErrUnavailable, err, EnvCache)
	}
	return filepath.Join(base, "workrouter", "kafka-"+Version), nil
}

// Install is a broker's runtime on this machine.
type Install struct {
	// Java is the java command.
	Java string
	// Libs is the directory holding every jar of the broker's classpath.
	Libs string
	// Fetched is true when this call ran Maven to fill Libs.
	Fetched bool
}

// Classpath returns the JVM classpath of the install (Libs/*).
func (in Install) Classpath() string { return filepath.Join(in.Libs, "*") }

// completeMarker is the file whose content, the hash of the pom, says Libs
// holds everything the pom lists.
const completeMarker = ".complete"

func pomHash() string {
	h := sha256.Sum256(append(append([]byte(nil), pom...), log4j2...))
	return hex.EncodeToString(h[:])
}

// javaCommand returns $JAVA_HOME/bin/java if JAVA_HOME is set, else java
// on PATH.
func javaCommand() (string, error) {
	if home := os.Getenv("JAVA_HOME"); home != "" {
		j := filepath.Join(home, "bin", "java")
		if _, err := os.Stat(j); err == nil {
			return j, nil
		}
	}
	j, err := exec.LookPath("java")
	if err != nil {
		return "", fmt.Errorf("%w: no java on PATH (Kafka %s needs Java 17 or later: apt-get install openjdk-17-jre-headless maven), or point WORKROUTER_TEST_BROKERS at a cluster", ErrUnavailable, Version)
	}
	return j, nil
}

// Fetch returns the broker's runtime, running Maven once to copy the
// classpath into cacheDir/libs (DefaultCacheDir if cacheDir is empty) when
// it is not complete there yet. A complete cache is used as it is: no
// Maven, no network. Concurrent callers, in this process or others, share
// one Maven run. logf, if not nil, is told when Maven runs.
func Fetch(ctx context.Context, cacheDir string, logf func(string, ...any)) (Install, error) {
	java, err := javaCommand()
	if err != nil {
		return Install{}, err
	}
	if cacheDir == "" {
		if cacheDir, err = DefaultCacheDir(); err != nil {
			return Install{}, err
		}
	}
	in := Install{Java: java, Libs: filepath.Join(cacheDir, "libs")}
	want := pomHash()
	if complete(in.Libs, want) {
		return in, nil
	}
	if err := os.MkdirAll(cacheDir, 0o755); err != nil {
		return Install{}, err
	}
	unlock, err := lockFile(ctx, filepath.Join(cacheDir, ".lock"))
	if err != nil {
		return Install{}, err
	}
	defer unlock()
	if complete(in.Libs, want) { // another process fetched it meanwhile
		return in, nil
	}
	mvn, err := exec.LookPath("mvn")
	if err != nil {
		return Install{}, fmt.Errorf("%w: the Kafka %s classpath is not cached in %s and there is no mvn on PATH to fetch it from Maven Central (apt-get install maven, then run `go run ./internal/kafkacluster/cmd/kafkacluster fetch`)", ErrUnavailable, Version, cacheDir)
	}
	if logf != nil {
		logf("kafkacluster: fetching the Kafka %s classpath into %s with Maven", Version, in.Libs)
	}
	if err := os.WriteFile(filepath.Join(cacheDir, "pom.xml"), pom, 0o644); err != nil {
		return Install{}, err
	}
	tmp := in.Libs + ".tmp"
	if err := os.RemoveAll(tmp); err != nil {
		return Install{}, err
	}
	cmd := exec.CommandContext(ctx, mvn, "-B", "-q", "-f", filepath.Join(cacheDir, "pom.xml"), "-Dkafka.libs="+tmp, "package")
	cmd.Dir = cacheDir
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return Install{}, fmt.Errorf("kafkacluster: mvn package in %s (fetching the Kafka %s classpath): %v\n%s", cacheDir, Version, err, tail(out.String(), 40))
	}
	if err := os.WriteFile(filepath.Join(tmp, completeMarker), []byte(want+"\n"), 0o644); err != nil {
		return Install{}, err
	}
	if err := os.RemoveAll(in.Libs); err != nil {
		return Install{}, err
	}
	if err := os.Rename(tmp, in.Libs); err != nil {
		return Install{}, err
	}
	in.Fetched = true
	return in, nil
}

func complete(libs, hash string) bool {
	b, err := os.ReadFile(filepath.Join(libs, completeMarker))
	return err == nil && strings.TrimSpace(string(b)) == hash
}

// tail returns the last n lines of s.
func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
