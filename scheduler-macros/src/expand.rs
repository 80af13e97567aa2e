//! Code generation: checks the function, then writes the job's unit struct and, in an
//! anonymous `const` block, the function itself and the struct's `Idempotent` impl.
//!
//! Generated code names `scheduler_core` items only through
//! `::scheduler_core::__private`, and the standard library through `::core`.

use std::time::Duration;

use proc_macro2::{Span, TokenStream};
use quote::{ToTokens, quote, quote_spanned};
use syn::ext::IdentExt;
use syn::spanned::Spanned;
use syn::{Attribute, Error, FnArg, ItemFn, ReturnType, Signature, Type};

use crate::args::{Args, CatchUp, Overlap, Policy, Schedule, Scope};

const SHAPE: &str = "async fn sweep(ctx: JobContext) -> Result<(), E>";

/// Expands `#[job(args)] item`. On any error: the item unchanged, plus the errors.
pub(crate) fn job(args: TokenStream, item: TokenStream) -> TokenStream {
    let args = Args::parse(args);
    let func = match syn::parse2::<ItemFn>(item.clone()) {
        Ok(func) => func,
        Err(err) => {
            let err = match syn::parse2::<syn::Item>(item.clone()) {
                // Another kind of item: say what `#[job]` goes on.
                Ok(_) => Error::new(
                    Span::call_site(),
                    format!("`#[job]` goes on an async function: `{SHAPE}`"),
                ),
                // Something syn cannot read: what it said.
                Err(_) => err,
            };
            return with_errors(item, [args.err(), Some(err)]);
        }
    };
    let checked = check_signature(&func.sig);
    match (args, checked) {
        (Ok(args), Ok(())) => match generate(args, func) {
            Ok(tokens) => tokens,
            Err(err) => with_errors(item, [Some(err)]),
        },
        (args, checked) => with_errors(item, [args.err(), checked.err()]),
    }
}

/// `item` followed by `errors`, so the item still exists for the IDE and later passes.
fn with_errors(
    mut item: TokenStream,
    errors: impl IntoIterator<Item = Option<Error>>,
) -> TokenStream {
    if let Some(err) = combine(errors.into_iter().flatten()) {
        item.extend(err.into_compile_error());
    }
    item
}

/// One error reporting all of `errors`, if there are any.
fn combine(errors: impl IntoIterator<Item = Error>) -> Option<Error> {
    errors.into_iter().reduce(|mut all, next| {
        all.combine(next);
        all
    })
}

/// Checks the function has the shape of a job: `async fn NAME(ctx: JobContext) -> R`,
/// where the type checker then holds `R` to `Result<(), E>` with `E: Into<BoxError>`.
/// Reports every mismatch at once.
fn check_signature(sig: &Signature) -> syn::Result<()> {
    let mut errors = Vec::new();
    if let Some(constness) = &sig.constness {
        errors.push(Error::new(
            constness.span,
            "a job cannot be a `const fn`; remove `const`",
        ));
    }
    if sig.asyncness.is_none() {
        let msg = format!("`#[job]` needs an async function; add `async`: `{SHAPE}`");
        errors.push(Error::new(sig.fn_token.span, msg));
    }
    if let Some(unsafety) = &sig.unsafety {
        errors.push(Error::new(
            unsafety.span,
            "a job cannot be `unsafe`; remove `unsafe`",
        ));
    }
    if let Some(abi) = &sig.abi {
        errors.push(Error::new_spanned(
            abi,
            "a job cannot have an ABI; remove it",
        ));
    }
    if !sig.generics.params.is_empty() || sig.generics.where_clause.is_some() {
        let msg = "a job cannot be generic; remove the type parameters, lifetimes and where clause";
        errors.push(Error::new_spanned(&sig.generics, msg));
    }
    if let Some(variadic) = &sig.variadic {
        errors.push(Error::new_spanned(
            variadic,
            format!("a job takes one parameter: `{SHAPE}`"),
        ));
    }
    let mut inputs = sig.inputs.iter();
    let first = inputs.next();
    match first {
        None => {
            let msg = format!("a job takes its context as its one parameter: `{SHAPE}`");
            errors.push(Error::new(sig.paren_token.span.join(), msg));
        }
        Some(FnArg::Receiver(receiver)) => {
            let msg = format!("a job is a free function, not a method; remove `self`: `{SHAPE}`");
            errors.push(Error::new_spanned(receiver, msg));
        }
        Some(FnArg::Typed(typed)) if !is_job_context(&typed.ty) => {
            let msg = "a job's parameter is its context, taken by value: `ctx: JobContext`";
            errors.push(Error::new_spanned(&typed.ty, msg));
        }
        Some(FnArg::Typed(_)) => {}
    }
    // After `self`, the context itself is "another parameter": the `self` error says it all.
    if let Some(extra) = inputs.next()
        && !matches!(first, Some(FnArg::Receiver(_)))
    {
        let msg = "a job takes one parameter, its `JobContext`; reach shared values with `ctx.state::<T>()`";
        errors.push(Error::new_spanned(extra, msg));
    }
    if let ReturnType::Default = sig.output {
        let msg = "a job returns `Result<(), E>`, where `E` converts into `BoxError`; add `-> Result<(), BoxError>`";
        errors.push(Error::new(sig.paren_token.span.close(), msg));
    }
    combine(errors).map_or(Ok(()), Err)
}

/// Whether `ty` is written `JobContext` or as a path ending in `JobContext`.
fn is_job_context(ty: &Type) -> bool {
    match ty {
        Type::Path(path) => {
            path.qself.is_none()
                && path
                    .path
                    .segments
                    .last()
                    .is_some_and(|last| last.ident == "JobContext" && last.arguments.is_none())
        }
        Type::Group(group) => is_job_context(&group.elem),
        Type::Paren(paren) => is_job_context(&paren.elem),
        _ => false,
    }
}

fn generate(args: Args, func: ItemFn) -> syn::Result<TokenStream> {
    let ItemFn {
        attrs,
        vis,
        sig,
        block,
    } = func;
    let ident = sig.ident.clone();
    let name = match args.name {
        Some(name) => name,
        None => {
            let name = ident.unraw().to_string();
            scheduler_spec::check_name(&name).map_err(|reason| {
                let msg =
                    format!("invalid job name {name:?}: {reason}; set one with `name = \"...\"`");
                Error::new(ident.span(), msg)
            })?;
            name
        }
    };

    let private = quote!(::scheduler_core::__private);
    let schedule = match &args.schedule {
        Schedule::Every(period) => {
            let period = duration(period);
            quote!(#private::Schedule::every(#period))
        }
        Schedule::Cron { expr, tz: None } => quote!(#private::Schedule::cron(#expr)),
        Schedule::Cron { expr, tz: Some(tz) } => {
            quote!(#private::Schedule::cron(#expr).in_time_zone(#tz))
        }
    };
    // Only what the attribute sets: the trait's defaults stay the defaults.
    let scope = args.scope.map(|scope| {
        let scope = match scope {
            Scope::Cluster => quote!(Cluster),
            Scope::Node => quote!(Node),
        };
        quote!(fn scope(&self) -> #private::Scope { #private::Scope::#scope })
    });
    let duplicate = args.fencing.map(|fencing| {
        let duplicate = if fencing {
            quote!(NeedsFencing)
        } else {
            quote!(Harmless)
        };
        quote!(fn duplicate(&self) -> #private::Duplicate { #private::Duplicate::#duplicate })
    });
    let jitter = args.jitter.map(|jitter| {
        let jitter = duration(&jitter);
        quote!(fn jitter(&self) -> #private::Duration { #jitter })
    });
    let catch_up = args.catch_up.map(|window| {
        let window = duration(&window);
        quote! {
            fn catch_up(&self) -> ::core::option::Option<#private::Duration> {
                ::core::option::Option::Some(#window)
            }
        }
    });
    let policy = (!args.policy.is_unset()).then(|| {
        let policy = policy(&args.policy);
        quote!(fn policy(&self) -> #private::Policy { #policy })
    });

    let state = (!args.state.is_empty()).then(|| {
        let types = &args.state;
        quote! {
            fn state_types(&self) -> #private::Vec<#private::StateType> {
                #private::Vec::from([#(#private::StateType::of::<#types>()),*])
            }
        }
    });

    // `JobResult` holds the function's result to `Result<(), E: Into<BoxError>>`. The
    // awaited call is spanned from the return type's first token to its last, so a
    // mismatch is reported on the whole return type.
    let (first, last) = span_range(&sig);
    let mut body = ident.clone();
    body.set_span(first);
    let awaited = quote_spanned!(last=> await);
    let run = quote!(JobResult::into_job_result(#body(ctx).#awaited));

    let mut on_struct = Vec::new();
    let mut on_fn = Vec::new();
    let mut cfgs = Vec::new();
    for attr in attrs {
        match Place::of(&attr) {
            Place::Struct => on_struct.push(attr),
            Place::Fn => on_fn.push(attr),
            Place::Both => {
                on_struct.push(attr.clone());
                on_fn.push(attr);
            }
            Place::Everywhere => {
                on_struct.push(attr.clone());
                cfgs.push(attr);
            }
        }
    }
    // The function keeps its name inside the block, where it shadows the struct's
    // value: the body reads as written, and `run` calls it by name.
    Ok(quote! {
        #(#on_struct)*
        #[allow(non_camel_case_types)]
        #[derive(Debug, Clone, Copy, Default)]
        #vis struct #ident;

        #(#cfgs)*
        const _: () = {
            #(#on_fn)*
            // `#[job]` wants it async, awaiting or not.
            #[allow(clippy::unused_async)]
            #sig #block

            #[diagnostic::on_unimplemented(
                message = "a job returns `Result<(), E>` where `E` converts into `BoxError`, not `{Self}`",
                label = "the job's return type",
            )]
            trait JobResult {
                fn into_job_result(self) -> ::core::result::Result<(), #private::BoxError>;
            }

            impl<E: ::core::convert::Into<#private::BoxError>> JobResult for ::core::result::Result<(), E> {
                fn into_job_result(self) -> ::core::result::Result<(), #private::BoxError> {
                    self.map_err(::core::convert::Into::into)
                }
            }

            // Naming a `deprecated` job here is no use of it.
            #[allow(deprecated)]
            #[#private::async_trait]
            impl #private::Idempotent for #ident {
                fn name(&self) -> &::core::primitive::str {
                    #name
                }

                fn schedule(&self) -> #private::Schedule {
                    #schedule
                }

                #scope
                #duplicate
                #jitter
                #catch_up
                #policy
                #state

                async fn run(&self, ctx: #private::JobContext) -> ::core::result::Result<(), #private::BoxError> {
                    #run
                }
            }
        };
    })
}

/// The spans of the first and last tokens of the function's return type (of its
/// closing parenthesis if it has none).
fn span_range(sig: &Signature) -> (Span, Span) {
    let ReturnType::Type(_, ty) = &sig.output else {
        let close = sig.paren_token.span.close();
        return (close, close);
    };
    let mut tokens = ty.to_token_stream().into_iter().map(|token| token.span());
    let first = tokens.next().unwrap_or_else(|| ty.span());
    let last = tokens.last().unwrap_or(first);
    (first, last)
}

/// `Policy::default()`, then a setter for each policy the keys set.
fn policy(policy: &Policy) -> TokenStream {
    let private = quote!(::scheduler_core::__private);
    let catch_up = policy.catch_up.map(|catch_up| {
        let catch_up = match catch_up {
            CatchUp::Skip => quote!(Skip),
            CatchUp::Latest => quote!(Latest),
            CatchUp::All { max } => quote!(All { max: #max }),
        };
        quote!(.catch_up(#private::CatchUp::#catch_up))
    });
    let overlap = policy.overlap.map(|overlap| {
        let overlap = match overlap {
            Overlap::Skip => quote!(Skip),
            Overlap::BufferOne => quote!(BufferOne),
            Overlap::CancelRunning => quote!(CancelRunning),
            Overlap::Concurrent { max } => quote!(Concurrent { max: #max }),
        };
        quote!(.overlap(#private::Overlap::#overlap))
    });
    let retry = policy.retry.map(|retry| {
        let attempts = retry.attempts;
        let backoff = duration(&retry.backoff);
        quote!(.retry(#attempts, #backoff))
    });
    let timeout = policy.timeout.map(|timeout| {
        let timeout = duration(&timeout);
        quote!(.timeout(#timeout))
    });
    quote!(#private::Policy::default() #catch_up #overlap #retry #timeout)
}

/// `Duration::new(secs, nanos)`, exact for any duration.
fn duration(d: &Duration) -> TokenStream {
    let secs = d.as_secs();
    let nanos = d.subsec_nanos();
    quote!(::scheduler_core::__private::Duration::new(#secs, #nanos))
}

/// Where one of the function's attributes goes.
enum Place {
    /// Docs and `deprecated`: they describe the job, which is the struct.
    Struct,
    /// Anything else (`tracing::instrument`, `inline`, `cfg_attr`, …): it acts on
    /// the function.
    Fn,
    /// Lint levels: whatever they silence may be in either.
    Both,
    /// `cfg`: it decides whether the job exists at all, so it goes on the struct and
    /// on the block holding the function and the impl.
    Everywhere,
}

impl Place {
    fn of(attr: &Attribute) -> Self {
        let path = attr.path();
        if path.is_ident("doc") || path.is_ident("deprecated") {
            Place::Struct
        } else if path.is_ident("cfg") {
            Place::Everywhere
        } else if ["allow", "expect", "warn", "deny", "forbid"]
            .iter()
            .any(|lint| path.is_ident(lint))
        {
            Place::Both
        } else {
            Place::Fn
        }
    }
}
