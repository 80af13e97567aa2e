//! `#[job]` (under construction: a helper is writing it).
use proc_macro::TokenStream;

/// Placeholder.
#[proc_macro_attribute]
pub fn job(_args: TokenStream, item: TokenStream) -> TokenStream {
    item
}
