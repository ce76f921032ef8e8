//! The follower graph of "Introduction to HBase Schema Design": one row per relationship, keyed
//! `md5(follower) + md5(followed)` in a one-letter family `f`. Who A follows is a short prefix
//! scan, "does A follow B" a get, unfollowing a delete. The digests give every user the same
//! 16-byte key width and spread users evenly; the names are kept in columns and restored on read.
//!
//! "Who follows A" needs the inverse key, so the app writes a second entity,
//! `md5(followed) + md5(follower)`, next to the first on every follow and unfollow.
//!
//! Run with `cargo run --release --example followers`. Every printed result is also asserted.

use cellar::orm::{Entity as _, Repository, Result};
use cellar::prelude::*;

#[derive(Entity, Debug, Clone, PartialEq)]
#[cellar(table = "follows", family = "f")]
struct Follows {
    #[cellar(key, hash = "md5", column = "a")]
    follower: String,
    #[cellar(key, hash = "md5", column = "b")]
    followed: String,
    #[cellar(column = "t")]
    since: Timestamp,
}

#[derive(Entity, Debug, Clone, PartialEq)]
#[cellar(table = "followed_by", family = "f")]
struct FollowedBy {
    #[cellar(key, hash = "md5", column = "b")]
    followed: String,
    #[cellar(key, hash = "md5", column = "a")]
    follower: String,
    #[cellar(column = "t")]
    since: Timestamp,
}

/// Both directions of the graph.
struct Graph {
    follows: Repository<Follows>,
    followed_by: Repository<FollowedBy>,
}

impl Graph {
    fn open(db: &Db) -> Result<Graph> {
        Ok(Graph { follows: db.repo()?, followed_by: db.repo()? })
    }

    fn follow(&self, follower: &str, followed: &str, since: Timestamp) -> Result<()> {
        let (follower, followed) = (follower.to_string(), followed.to_string());
        self.follows.put(&Follows { follower: follower.clone(), followed: followed.clone(), since })?;
        self.followed_by.put(&FollowedBy { followed, follower, since })
    }

    fn unfollow(&self, follower: &str, followed: &str) -> Result<()> {
        self.follows.delete((follower.to_string(), followed.to_string()))?;
        self.followed_by.delete((followed.to_string(), follower.to_string()))
    }

    fn does_follow(&self, follower: &str, followed: &str) -> Result<bool> {
        self.follows.exists((follower.to_string(), followed.to_string()))
    }

    /// Whom `user` follows, by name (the scan returns them in digest order).
    fn following(&self, user: &str) -> Result<Vec<String>> {
        let rows = self.follows.scan().prefix(FollowsKey::follower(user.into())).to_vec()?;
        Ok(sorted(rows.into_iter().map(|f| f.followed)))
    }

    /// Who follows `user`, by name.
    fn followers(&self, user: &str) -> Result<Vec<String>> {
        let rows = self.followed_by.scan().prefix(FollowedByKey::followed(user.into())).to_vec()?;
        Ok(sorted(rows.into_iter().map(|f| f.follower)))
    }
}

fn sorted(names: impl Iterator<Item = String>) -> Vec<String> {
    let mut v: Vec<String> = names.collect();
    v.sort();
    v
}

pub(crate) fn main() -> Result<()> {
    let db = Db::open_temporary()?;
    let graph = Graph::open(&db)?;
    println!("{}", Follows::layout());
    assert_eq!(Follows::advice(), [], "hashed keys and a one-letter family follow the rules of thumb");

    let t = Timestamp(1_795_856_400_000);
    for (a, b) in [("alice", "bob"), ("alice", "carol"), ("alice", "dave"), ("bob", "alice"), ("carol", "alice")] {
        graph.follow(a, b, t)?;
    }
    let following = graph.following("alice")?;
    println!("alice follows {following:?}");
    assert_eq!(following, ["bob", "carol", "dave"]);

    let answers = [graph.does_follow("alice", "bob")?, graph.does_follow("bob", "carol")?];
    println!("alice follows bob: {}, bob follows carol: {}", answers[0], answers[1]);
    assert_eq!(answers, [true, false]);

    let followers = graph.followers("alice")?;
    println!("alice is followed by {followers:?}");
    assert_eq!(followers, ["bob", "carol"]);

    graph.unfollow("alice", "carol")?;
    let (following, of_carol) = (graph.following("alice")?, graph.followers("carol")?);
    println!("after alice unfollows carol: alice follows {following:?}; carol's followers {of_carol:?}");
    assert_eq!(following, ["bob", "dave"]);
    assert!(of_carol.is_empty());
    assert!(!graph.does_follow("alice", "carol")?);
    println!("followers: ok");
    Ok(())
}
