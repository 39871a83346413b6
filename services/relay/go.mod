module github.com/chatd/chatd/services/relay

go 1.26.8

require github.com/chatd/chatd/pkg v0.0.0

replace github.com/chatd/chatd/pkg => ../../pkg
