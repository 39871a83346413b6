package auth

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"math/big"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestExemptMatcher(t *testing.T) {
	t.Parallel()
	m := exemptMatcher(append(append([]string(nil), DefaultExempt...), "chatd.v1.ChatService/GetOpenAPI", "/chatd.v1.Public/*"))
	for method, want := range map[string]bool{
		"/grpc.health.v1.Health/Check":                                   true,
		"/grpc.health.v1.Health/Watch":                                   true,
		"/grpc.health.v1.HealthX/Check":                                  false,
		"/grpc.health.v2.Health/Check":                                   false,
		"/grpc.reflection.v1.ServerReflection/ServerReflectionInfo":      true,
		"/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo": true,
		"/grpc.reflectionx.Foo/Bar":                                      false,
		"/chatd.v1.ChatService/GetOpenAPI":                               true,
		"/chatd.v1.ChatService/GetChat":                                  false,
		"/chatd.v1.Public/Anything":                                      true,
		"/chatd.v1.PublicX/Anything":                                     false,
		"":                                                               false,
	} {
		require.Equal(t, want, m(method), method)
	}
}

func TestParseJWKSSkipsUnusableKeys(t *testing.T) {
	t.Parallel()
	b64 := base64.RawURLEncoding.EncodeToString
	small, err := rsa.GenerateKey(rand.Reader, 1024)
	require.NoError(t, err)
	big2048, err := rsa.GenerateKey(rand.Reader, 2048)
	require.NoError(t, err)
	ec, err := ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	require.NoError(t, err)
	pt, err := ec.PublicKey.Bytes()
	require.NoError(t, err)
	x, y := pt[1:49], pt[49:]
	e := b64(big.NewInt(65537).Bytes())
	offCurve := append([]byte(nil), y...)
	offCurve[len(offCurve)-1] ^= 1

	keys := []map[string]any{
		{"kty": "oct", "kid": "sym", "k": b64([]byte("0123456789abcdef0123456789abcdef"))},
		{"kty": "RSA", "kid": "small", "n": b64(small.N.Bytes()), "e": e},
		{"kty": "RSA", "kid": "enc", "use": "enc", "n": b64(big2048.N.Bytes()), "e": e},
		{"kty": "RSA", "kid": "even-e", "n": b64(big2048.N.Bytes()), "e": b64([]byte{2})},
		{"kty": "RSA", "kid": "rsa-as-es", "alg": "ES256", "n": b64(big2048.N.Bytes()), "e": e},
		{"kty": "EC", "kid": "off-curve", "crv": "P-384", "x": b64(x), "y": b64(offCurve)},
		{"kty": "EC", "kid": "wrong-alg", "crv": "P-384", "alg": "ES256", "x": b64(x), "y": b64(y)},
		{"kty": "EC", "kid": "secp256k1", "crv": "secp256k1", "x": b64(x), "y": b64(y)},
		{"kty": "OKP", "kid": "ed", "crv": "Ed25519", "x": b64(make([]byte, 32))},
		{"kty": "RSA", "kid": "good-rsa", "n": b64(big2048.N.Bytes()) + "==", "e": e},
		{"kty": "EC", "kid": "good-ec", "crv": "P-384", "x": b64(x), "y": b64(y), "key_ops": []string{"verify"}},
	}
	body, err := json.Marshal(map[string]any{"keys": keys})
	require.NoError(t, err)
	got, err := parseJWKS(body)
	require.NoError(t, err)
	require.Len(t, got, 2)
	require.Equal(t, "good-rsa", got[0].kid)
	require.True(t, got[0].compatible("RS256"))
	require.True(t, got[0].compatible("PS512"))
	require.False(t, got[0].compatible("ES256"))
	require.Equal(t, "good-ec", got[1].kid)
	require.True(t, got[1].compatible("ES384"))
	require.False(t, got[1].compatible("ES256"))
	require.False(t, got[1].compatible("RS256"))
	require.True(t, got[1].key.(*ecdsa.PublicKey).Equal(&ec.PublicKey))

	_, err = parseJWKS([]byte(`{"keys":[]}`))
	require.EqualError(t, err, "the JWK Set has no RSA or EC signature key")
	_, err = parseJWKS([]byte(`<html>`))
	require.ErrorContains(t, err, "the answer is not a JWK Set")
}
