package envelope

// The Decoder's limits, for the external tests.
const (
	DecoderTypes   = decoderTypes
	DecoderIDChunk = decoderIDChunk
)
