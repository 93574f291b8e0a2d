// Package testtls makes throwaway TLS material for tests: a CA, a server
// certificate it signs for 127.0.0.1 and localhost, and a client
// certificate, written as PEM files into a test's temporary directory.
// Nothing here is for production: keys are ECDSA P-256 made at run time
// and live as long as the test.
package testtls

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// Files are the PEM files of one CA and the certificates it signed.
type Files struct {
	Dir        string
	CA         string // the CA certificate
	ServerCert string // for 127.0.0.1, ::1 and localhost
	ServerKey  string
	ClientCert string // a client certificate (mutual TLS)
	ClientKey  string
}

// New makes a fresh CA and its server and client certificates in a new
// temporary directory of t, and returns their paths. It fails t on any
// error. Call it from the test's goroutine.
func New(t testing.TB) Files {
	t.Helper()
	dir := t.TempDir()
	f := Files{Dir: dir,
		CA:         filepath.Join(dir, "ca.pem"),
		ServerCert: filepath.Join(dir, "server.pem"), ServerKey: filepath.Join(dir, "server-key.pem"),
		ClientCert: filepath.Join(dir, "client.pem"), ClientKey: filepath.Join(dir, "client-key.pem"),
	}
	caKey := newKey(t)
	now := time.Now()
	ca := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "workrouter test CA"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(24 * time.Hour),
		IsCA:                  true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatalf("testtls: CA: %v", err)
	}
	caCert, err := x509.ParseCertificate(caDER)
	if err != nil {
		t.Fatalf("testtls: CA: %v", err)
	}
	writePEM(t, f.CA, "CERTIFICATE", caDER)

	leaf := func(serial int64, cn string, usage x509.ExtKeyUsage, certPath, keyPath string) {
		key := newKey(t)
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(serial),
			Subject:      pkix.Name{CommonName: cn},
			NotBefore:    now.Add(-time.Hour),
			NotAfter:     now.Add(24 * time.Hour),
			KeyUsage:     x509.KeyUsageDigitalSignature,
			ExtKeyUsage:  []x509.ExtKeyUsage{usage},
		}
		if usage == x509.ExtKeyUsageServerAuth {
			tmpl.DNSNames = []string{"localhost"}
			tmpl.IPAddresses = []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback}
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, caKey)
		if err != nil {
			t.Fatalf("testtls: %s: %v", cn, err)
		}
		writePEM(t, certPath, "CERTIFICATE", der)
		kder, err := x509.MarshalECPrivateKey(key)
		if err != nil {
			t.Fatalf("testtls: %s key: %v", cn, err)
		}
		writePEM(t, keyPath, "EC PRIVATE KEY", kder)
	}
	leaf(2, "workrouter test broker", x509.ExtKeyUsageServerAuth, f.ServerCert, f.ServerKey)
	leaf(3, "workrouter test client", x509.ExtKeyUsageClientAuth, f.ClientCert, f.ClientKey)
	return f
}

// ServerConfig returns a TLS server configuration with the server
// certificate. It fails t on any error.
func (f Files) ServerConfig(t testing.TB) *tls.Config {
	t.Helper()
	cert, err := tls.LoadX509KeyPair(f.ServerCert, f.ServerKey)
	if err != nil {
		t.Fatalf("testtls: server certificate: %v", err)
	}
	return &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
}

func newKey(t testing.TB) *ecdsa.PrivateKey {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatalf("testtls: key: %v", err)
	}
	return k
}

func writePEM(t testing.TB, path, typ string, der []byte) {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatalf("testtls: %v", err)
	}
}
