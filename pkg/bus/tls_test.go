package bus_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/skein-mesh/skein/pkg/auth"
	"github.com/skein-mesh/skein/pkg/bus"
	"github.com/skein-mesh/skein/pkg/protocol"
)

// writePKI makes a CA and one certificate for 127.0.0.1 usable by server and client, as PEM files.
func writePKI(t *testing.T, dir string) bus.TLSFiles {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "skein test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "skein mesh"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, DNSNames: []string{"localhost"},
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	f := bus.TLSFiles{CA: filepath.Join(dir, "ca.pem"), Cert: filepath.Join(dir, "cert.pem"), Key: filepath.Join(dir, "key.pem")}
	for path, block := range map[string]*pem.Block{f.CA: {Type: "CERTIFICATE", Bytes: caDER}, f.Cert: {Type: "CERTIFICATE", Bytes: der}, f.Key: {Type: "EC PRIVATE KEY", Bytes: keyDER}} {
		if err := os.WriteFile(path, pem.EncodeToMemory(block), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return f
}

// TestTLS: with mesh.tls the embedded server speaks only TLS and asks for a client certificate
// signed by the CA; a client with the block connects, one without it or without a certificate
// does not.
func TestTLS(t *testing.T) {
	pki := writePKI(t, t.TempDir())
	creds := t.TempDir()
	srv, err := bus.StartEmbedded(bus.EmbeddedOptions{StoreDir: t.TempDir(), Listen: "127.0.0.1:0", CredsDir: creds, Names: protocol.NewNames(""), TLS: pki})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	id := bus.WithCreds(auth.File(creds, auth.Admin))

	c, err := bus.Connect(ctx, srv.URL(), "tls", 5*time.Second, id, bus.WithTLS(pki))
	if err != nil {
		t.Fatalf("TLS client: %v", err)
	}
	defer c.Close()
	if !c.NC.TLSRequired() {
		t.Error("connection is not TLS")
	}
	if err := bus.Provision(ctx, c.JS, protocol.NewNames(""), bus.DefaultLimits()); err != nil {
		t.Fatalf("provision over TLS: %v", err)
	}

	if c, err := bus.Connect(ctx, srv.URL(), "plain", time.Second, id); err == nil {
		c.Close()
		t.Error("a plain-text client connected to a TLS server")
	}
	if c, err := bus.Connect(ctx, srv.URL(), "no-cert", time.Second, id, bus.WithTLS(bus.TLSFiles{CA: pki.CA})); err == nil {
		c.Close()
		t.Error("a client without a certificate connected to a server that verifies them")
	}
	other := writePKI(t, t.TempDir())
	if c, err := bus.Connect(ctx, srv.URL(), "wrong-ca", time.Second, id, bus.WithTLS(other)); err == nil {
		c.Close()
		t.Error("a client trusting another CA connected")
	}
}
